"""Data sources, the normalised question schema and the verl training format."""
