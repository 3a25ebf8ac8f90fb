"""Where the views' records come from besides the own engine: a replayed trace per viewer, or
another engine's (vLLM's) records over the ingest websocket."""
