"""Batchscope's dashboard from a checkout: ``python app.py [flags]`` (``make run``; a Hugging
Face Space runs this file too). The code is batchscope/app.py, which the installed
``batchscope`` command runs; ``python app.py --help`` lists the flags.

``import app`` (tests, benchmarks) gets that very module, not a copy of its names, so that
patching ``app.create_app`` reaches ``app.main``.
"""
import sys

from batchscope import app as dashboard

if __name__ == "__main__":
    dashboard.main()
else:
    sys.modules[__name__] = dashboard
