"""A BERT-base-sized text encoder in plain PyTorch, tuned as one module."""
