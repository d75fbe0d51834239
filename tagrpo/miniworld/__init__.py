"""The mini world: synthetic arithmetic problems with phrasing families, offline."""
