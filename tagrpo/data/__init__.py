"""What a row is and where rows come from: the normalised question schema, the prompt formats
(chat messages, the rephrasing templates), the benchmark sources and the verl training format.
The data stage that builds tables from them is :mod:`tagrpo.splits`."""
