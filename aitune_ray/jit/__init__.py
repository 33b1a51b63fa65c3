"""Just-in-time tuning (AITune's aitune.torch.jit): modules tuned while the program runs, in the background."""
