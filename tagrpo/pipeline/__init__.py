"""Pipeline plumbing: how the DVC stages run, are tracked and are checked (no science here)."""
