"""Where the views' records come from besides the own engine: a replayed trace per viewer."""
