"""The grounded step-level dataset (``leir dataset build|stats``).

- ``variants``: shape variants of each workload, each checked before use;
- ``build``: trajectories from each start program: legal candidates,
  measured through the measurement engine, one chosen by a seeded policy,
  verified, recorded (resumable, deterministic for a seed);
- ``records``: the sample schema (one line of ``samples.jsonl``);
- ``export``: Step-TP chat form, full JSONL and Parquet, splits by workload,
  filtering (per-strategy caps, dedup);
- ``stats``: counts, rates, distributions, token counts and plots.

Importing this package imports neither TVM nor NumPy.
"""
