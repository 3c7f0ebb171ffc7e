"""What a killed export leaves is removed by the next export (issue 28, point 10).

An export writes each SavedModel under `<name>.incomplete-<pid>` and renames it when complete,
and stages the vocab in `<tmp>/bert_tf_export_<pid>_*`; a kill leaves both. The next export
deletes those of processes that are gone, never a live process's.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.serving import saved_model
from bert_tf.serving import tf_serving
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
CONFIG = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=24, max_position_embeddings=32, type_vocab_size=2)


def _dead_pid():
  return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                            capture_output=True, text=True, check=True).stdout)


def _leftover(path):
  """A half-written SavedModel folder."""
  os.makedirs(os.path.join(path, "variables"))
  with open(os.path.join(path, "saved_model.pb"), "wb") as f:
    f.write(b"partial")
  return path


def test_stale_temporaries_are_removed_and_live_ones_kept(tmp_path):
  dead, live = _dead_pid(), os.getppid()
  stale = [_leftover(str(tmp_path / f"3.incomplete-{dead}")),
           _leftover(str(tmp_path / f"encoder.incomplete-{dead}"))]
  kept = [_leftover(str(tmp_path / f"4.incomplete-{live}")), _leftover(str(tmp_path / "2")),
          _leftover(str(tmp_path / "3.incomplete-x"))]
  assert sorted(tf_serving.remove_stale_exports(str(tmp_path))) == sorted(stale)
  assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in kept)
  assert tf_serving.remove_stale_exports(str(tmp_path / "missing")) == []


@pytest.mark.slow
def test_the_next_export_removes_a_killed_exports_leftovers(tmp_path):
  dead, live = _dead_pid(), os.getppid()
  model_dir = tmp_path / "export" / "bert_encoder"
  stale_version = _leftover(str(model_dir / f"1.incomplete-{dead}"))
  live_version = _leftover(str(model_dir / f"7.incomplete-{live}"))
  staging_root = tempfile.gettempdir()
  stale_staging = tempfile.mkdtemp(prefix=f"bert_tf_export_{dead}_", dir=staging_root)
  live_staging = tempfile.mkdtemp(prefix=f"bert_tf_export_{live}_", dir=staging_root)
  for folder in (stale_staging, live_staging):
    io.write_text(os.path.join(folder, "vocab.txt"), "[PAD]\n")
  try:
    rng = np.random.default_rng(0)
    # The encoder alone (no cls/ heads: no fill_mask and next_sentence signatures to trace).
    weights = {k: v for k, v in helpers.random_original_weights(CONFIG, rng).items()
               if not k.startswith("cls/")}
    # A vocab with a blank line (the token "", as the original reads it) exports as it is.
    vocab = tmp_path / "vocab.txt"
    lines = open(VOCAB, encoding="utf-8").read().split("\n")
    vocab.write_text("\n".join(lines[:6] + [""] + lines[7:]), encoding="utf-8")
    paths = saved_model.export_serving_models(CONFIG, weights, str(vocab),
                                             str(tmp_path / "export"), seq_length=16,
                                             warmup=False,
                                             length_buckets="none")  # fewer signatures to trace
    assert (tmp_path / "export" / "bert" / "1" / "assets" / "vocab.txt").read_bytes() == \
        vocab.read_bytes()
    assert paths["encoder"] == str(model_dir / "1")
    assert not os.path.exists(stale_version) and not os.path.exists(stale_staging)
    assert os.path.isdir(live_version) and os.path.isdir(live_staging)
    assert sorted(os.listdir(model_dir)) == ["1", f"7.incomplete-{live}"]
    # The export's own staging folder is gone too.
    assert not [n for n in os.listdir(staging_root)
                if n.startswith(f"bert_tf_export_{os.getpid()}_")]
  finally:
    io.remove_if_exists(live_staging)
    io.remove_if_exists(stale_staging)


@pytest.mark.slow
def test_plain_saved_models_of_a_killed_pretraining_export_are_removed(tmp_path):
  from bert_tf.model.heads import build_pretraining_model  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import saved_model  # pylint: disable=g-import-not-at-top
  dead = _dead_pid()
  export_dir = tmp_path / "export"
  stale = [_leftover(str(export_dir / "encoder" / f"40.incomplete-{dead}")),
           _leftover(str(export_dir / "pretraining" / f"40.incomplete-{dead}"))]
  written = saved_model.export_saved_models(build_pretraining_model(CONFIG), CONFIG,
                                            str(export_dir), version=40)
  assert written == str(export_dir / "encoder" / "40")
  assert not any(os.path.exists(p) for p in stale)
  for name in ("encoder", "pretraining"):
    assert os.listdir(export_dir / name) == ["40"]
    assert os.listdir(export_dir / name / "40" / "assets") == ["bert_config.json"]
