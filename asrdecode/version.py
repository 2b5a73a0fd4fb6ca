"""asrdecode's version (pyproject.toml's), readable by any module without importing the package's API."""

__version__ = "0.1.0"
