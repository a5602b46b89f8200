"""The package's version, at the bottom of the package so that any module may read it without
importing the package's facade (``cfgzip_lab/__init__.py``); pyproject.toml states it too."""

__version__ = "0.1.0"
