"""Where the project's browser client and data files live (assets/, beside viz/)."""
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
