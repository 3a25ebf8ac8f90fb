"""Which address a client has, for the per-client limits: the socket peer, unless that peer is
a proxy we trust, and then the address that proxy put in X-Forwarded-For.

uvicorn does the rewriting (``proxy_headers`` with ``forwarded_allow_ips``: it takes the
right-most address of X-Forwarded-For that is not itself a trusted proxy, so an address a
client writes into the header to the left of what the proxy appended is never believed). By
default no proxy is trusted and every client counts as its socket address. On a Hugging Face
Space (``SPACE_ID`` set) requests arrive through the Space's proxy from a private-network
address, so private networks are trusted there. ``*`` (trust everyone) makes uvicorn take the
left-most address, which clients can forge: avoid it where limits matter.

Importable without torch (replay mode uses it too: the scheme a proxy forwards matters there).
"""
from __future__ import annotations

import argparse
import os

PRIVATE_NETWORKS = "127.0.0.0/8,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"


def default_forwarded_allow_ips() -> str | None:
    return PRIVATE_NETWORKS if os.environ.get("SPACE_ID") else None


def add_proxy_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--forwarded-allow-ips", metavar="ADDRESSES", default=default_forwarded_allow_ips(),
        help="comma-separated proxy IPs or networks whose X-Forwarded-For is believed (uvicorn's "
             "convention); default: none, each client is its socket address; on a Hugging Face "
             f"Space: private networks ({PRIVATE_NETWORKS})")


def uvicorn_proxy_options(forwarded_allow_ips: str | None) -> dict:
    """Keyword arguments for ``uvicorn.run``/``uvicorn.Config``."""
    if not forwarded_allow_ips:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": forwarded_allow_ips}
