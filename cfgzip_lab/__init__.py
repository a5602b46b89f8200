"""cfgzip_lab: token-space compression (CFGzip) of grammar-constrained decoding.

Grammar text → byte CFG → factored GNF → displacement classes → XGrammar over
class representatives → one gather back to the vocabulary. Lossless by
construction and checked against plain XGrammar by :mod:`cfgzip_lab.verify`.
"""
__version__ = "0.1.0"
