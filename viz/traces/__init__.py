"""Recorded runs: the trace format, recording, playback and the offline exports."""
