"""Live transport: the hub that fans records and events out to viewers, their outboxes, the
message frames, who may read what, and the websocket and SSE routes."""
