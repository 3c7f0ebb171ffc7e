"""bert_tf: Google's original BERT on TensorFlow 2 / Keras 3.

Importing this package before TensorFlow turns on TensorFlow's oneDNN CPU kernels on x86-64
(TF_ENABLE_ONEDNN_OPTS=1). TensorFlow turns them on by itself only on CPUs with AVX-512 VNNI,
BF16 or AMX; on AVX2 machines it otherwise uses its Eigen kernels, and there fine-tuning
BERT-Small ran faster with oneDNN (the figures: benchmarks/README.md, "oneDNN"). TensorFlow
reads the variable once, when it is first imported, so this has effect only when bert_tf (or one
of its tools) is imported first. A value the user has set, e.g. TF_ENABLE_ONEDNN_OPTS=0, is
kept. Other machines (ARM, whose TensorFlow builds decide for themselves; Windows) are left
alone. Without AVX-512, TensorFlow then logs one harmless E line per process ("oneDNN supports
DT_INT64 only on platforms with AVX-512"; an int64 transpose, as in the raw-text graphs, keeps
its Eigen kernel), which the commands hide (bert_tf/logs.py).

The package's only import is `os`, which Python has loaded before any user code runs: importing
bert_tf still loads no TensorFlow (data-preparation workers rely on that).
"""

import os

__version__ = "0.1.0"

ONEDNN_MACHINES = ("x86_64", "amd64")


def _default_to_onednn():
  uname = getattr(os, "uname", None)  # POSIX only
  if uname is not None and uname().machine.lower() in ONEDNN_MACHINES:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


_default_to_onednn()
