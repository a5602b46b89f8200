"""cfgzip inside serving engines: an SGLang grammar backend and a vLLM logits processor.

``grammars`` (request → EBNF, the server's token table, one native engine per grammar),
``sglang_backend`` (the ``cfgzip`` grammar backend, registered by the ``sglang.srt.plugins``
entry point), ``vllm_processor`` (the ``vllm.logits_processors`` entry point, for vLLM's V1 and
Model Runner V2 interfaces). README.md, "Serving", has the commands and what each route costs.
The engine modules import their engine; ``grammars`` imports neither.
"""
