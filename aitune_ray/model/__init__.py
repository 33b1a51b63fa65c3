"""The user's model and its inputs: samples, recording, wrapping, dynamic dims, datasets, max batch."""
