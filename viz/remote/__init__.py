"""Engines in another process reached over HTTP: attach mode's OpenAI-compatible client."""
