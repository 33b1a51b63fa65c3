"""Runnable aitune-ray jobs: each package has model.py (make_model, make_data) and job.yaml."""
