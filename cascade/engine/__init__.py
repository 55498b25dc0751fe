"""The engine: one generation at a time over a pair of models. The loop (`loop.py`) asks a policy (`policies.py`)
how each round is written; each model's KV cache is a cursor (`runner.py`); the engine (`engine.py`) runs the loop
under the pair's lock, yielding typed events (`events.py`)."""
