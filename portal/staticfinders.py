"""Serve plotly.js from the installed plotly package, so charts need no CDN.

Only ``plotly.min.js`` is exposed (as ``vendor/plotly.min.js``), not the package's
datasets and widget bundle.
"""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_DIR = Path(plotly.__file__).parent / "package_data"
PUBLIC_NAME = "vendor/plotly.min.js"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PLOTLY_DIR))
        self.storage.prefix = "vendor"

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        match = str(PLOTLY_DIR / "plotly.min.js") if path == PUBLIC_NAME else None
        if find_all or kwargs.get("all"):
            return [match] if match else []
        return match

    def list(self, ignore_patterns):
        yield "plotly.min.js", self.storage
