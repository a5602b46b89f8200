"""cfgzip_lab."""
