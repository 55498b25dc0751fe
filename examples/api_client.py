"""Stream an answer from cascade's OpenAI-compatible API and print the big model's tokens in red.

    python app.py                      # the page and the API on http://127.0.0.1:7860
    python examples/api_client.py      # (or CASCADE_API_URL=http://host:port/v1 python examples/api_client.py)

Needs the `openai` package (pip install openai). Any key works unless the server sets CASCADE_API_KEY.
"""

import os

from openai import OpenAI

RED, RESET = "\033[91m", "\033[0m"

client = OpenAI(base_url=os.environ.get("CASCADE_API_URL", "http://127.0.0.1:7860/v1"),
                api_key=os.environ.get("CASCADE_API_KEY", "none"))
stream = client.chat.completions.create(
    model="cascade",  # a policy: cascade, bild, speculative, target, draft, lookup, lookup+draft, auto
    messages=[{"role": "user", "content": "Explain in three sentences why the sky is blue."}],
    stream=True,
    stream_options={"include_usage": True},
    extra_body={"cascade": {"threshold": 3}},  # the project's own settings: rule, threshold, k, ...
)
for chunk in stream:
    if chunk.choices:
        # Each chunk's choice says, for every token in it, which model wrote it.
        for token in (chunk.choices[0].model_extra or {}).get("cascade", {}).get("tokens", []):
            print(RED + token["text"] + RESET if token["writer"] == "target" else token["text"], end="", flush=True)
    elif chunk.usage:
        figures = chunk.usage.model_extra["cascade"]
        print(f"\n\n{chunk.usage.completion_tokens} tokens, {figures['target_share']:.0%} by the big model, "
              f"{figures['tokens_per_s']:.1f} tokens/s")
