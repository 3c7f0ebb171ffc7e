"""What the serving tests share: the tiny model's config and the export every test reads.

The export (`exported`, a session fixture in conftest.py) is written once by the real command
line from a TF1 checkpoint of a tiny random model and read by test_serving.py and test_tf_hub.py.
"""

import json
import os
import subprocess
import sys

import keras

from bert_tf import tokenization
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.heads import build_pretraining_model

from tests import helpers
from tests.helpers import REPO_ROOT, TEST_DATA

VOCAB = os.path.join(TEST_DATA, "vocab_uncased.txt")
SEQ_LENGTH = 24
TOP_K = 4
# initializer_range 0.5 spreads the masked LM logits, so the top-k order of a random model is
# not decided by float rounding.
CONFIG = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=37, max_position_embeddings=64, initializer_range=0.5)
METADATA = {"format": "test", "max_seq_length": 128}


def export_with_the_command_line(root, flags=()):
  """Exports through `python -m bert_tf.export` (with `flags` added) into root/export (version
  3); returns (paths, keras pretraining model, python tokenizer, root)."""
  keras.utils.set_random_seed(7)
  model = build_pretraining_model(CONFIG)
  ckpt_dir = root / "ckpt"
  ckpt_dir.mkdir()
  checkpoints.save_tf1_checkpoint(model, str(ckpt_dir / "bert_model.ckpt"))
  CONFIG.to_json_file(str(ckpt_dir / "bert_config.json"))
  metadata_file = root / "data.metadata.json"
  metadata_file.write_text(json.dumps(METADATA))
  export_dir = root / "export"
  command = [sys.executable, "-m", "bert_tf.export",
             f"--checkpoint={ckpt_dir / 'bert_model.ckpt'}", f"--vocab_file={VOCAB}",
             f"--export_dir={export_dir}", f"--seq_length={SEQ_LENGTH}", f"--top_k={TOP_K}",
             f"--data_metadata_file={metadata_file}", "--version=3", *flags]
  env = helpers.subprocess_env()
  result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  paths = _paths(export_dir)
  for kind, path in paths.items():
    assert f"{kind}: {path}" in result.stdout
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  return paths, model, tokenizer, root


def _paths(export_dir):
  return dict(encoder=str(export_dir / "bert_encoder" / "3"),
              preprocessor=str(export_dir / "bert_preprocessor" / "3"),
              text=str(export_dir / "bert" / "3"))


def read_export(root):
  """What export_with_the_command_line(root) returned, read back from root once it is written:
  the model's weights come from the checkpoint the export was made from."""
  model = build_pretraining_model(CONFIG)
  report = checkpoints.load_weights(model, str(root / "ckpt" / "bert_model.ckpt"), strict=True)
  assert report.loaded and not report.missing, report
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  return _paths(root / "export"), model, tokenizer, root


