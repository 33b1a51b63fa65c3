"""A stack of pre-norm residual MLP blocks, tuned as one module."""
