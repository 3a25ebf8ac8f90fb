"""Batchscope's dashboard as an installed tool: the ``batchscope`` command (app.py here) and,
in a wheel, the browser client and data files as package data (batchscope/assets, built from
the checkout's assets/; viz/paths.py finds either)."""
