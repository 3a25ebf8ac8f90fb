"""Where the project's browser client and data files live: assets/ beside viz/ in a checkout;
batchscope/assets beside viz/ once installed from the wheel, which ships assets/ as the package
data of ``batchscope.assets`` (pyproject.toml)."""
from pathlib import Path

_BESIDE_VIZ = Path(__file__).resolve().parent.parent  # the checkout, or site-packages
_INSTALLED = _BESIDE_VIZ / "batchscope" / "assets"
ASSETS = _INSTALLED if _INSTALLED.is_dir() else _BESIDE_VIZ / "assets"
