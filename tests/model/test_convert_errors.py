"""Tests of python -m bert_tf.convert_checkpoint: refusing existing outputs, atomic writes and
one-line errors naming the flag or the file (run in-process on a tiny model)."""

import json
import os

import numpy as np
import pytest

from bert_tf import convert_checkpoint
from bert_tf.model import checkpoints
from bert_tf.model import conversion
from tests import helpers

TINY = helpers.tiny_config(vocab_size=20, hidden_size=16, intermediate_size=8,
                           num_hidden_layers=1, max_position_embeddings=8)
PROGRAM = "convert_checkpoint"


HF_TOKENIZER_FILES = ["special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
  """A tf1 checkpoint and a Hugging Face folder of the same weights, each with its config and
  vocab: an original release's folder (its name says uncased) and a Hugging Face model folder
  (tokenizer_config.json says uncased)."""
  root = tmp_path_factory.mktemp("sources")
  weights = helpers.random_original_weights(TINY, np.random.default_rng(3), heads=False)
  tf1_dir = root / "uncased_L-12_H-768_A-12"
  os.makedirs(tf1_dir)
  prefix = checkpoints.write_tf1_checkpoint(weights, str(tf1_dir / "bert_model.ckpt"))
  TINY.to_json_file(str(tf1_dir / "bert_config.json"))
  vocab = "\n".join(helpers.VOCAB_TOKENS[:TINY.vocab_size]) + "\n"
  (tf1_dir / "vocab.txt").write_text(vocab)
  os.makedirs(root / "hf")
  hf_path = checkpoints.write_hf_safetensors(weights, str(root / "hf" / "model.safetensors"),
                                             prefix="")
  (root / "hf" / "config.json").write_text(json.dumps(conversion.hf_config_dict(TINY)))
  (root / "hf" / "vocab.txt").write_text(vocab)
  (root / "hf" / "tokenizer_config.json").write_text(
      json.dumps(conversion.hf_tokenizer_config(True, TINY.max_position_embeddings)))
  return dict(tf1=prefix, hf=hf_path, weights=weights, config=str(tf1_dir / "bert_config.json"))


@pytest.fixture(autouse=True)
def _no_traceback_env(monkeypatch):
  monkeypatch.delenv("BERT_TF_TRACEBACK", raising=False)


def convert(capsys, *args):
  """Runs the tool in-process; returns (exit code, its one `convert_checkpoint:` stderr line)."""
  capsys.readouterr()
  code = helpers.run_cli_in_process(convert_checkpoint, [PROGRAM, *args])
  err = capsys.readouterr().err
  assert "Traceback" not in err
  lines = [line for line in err.splitlines() if line.startswith(f"{PROGRAM}: ")]
  assert len(lines) == (0 if code == 0 else 1), err
  return code, (lines[0] if lines else "")


def files_in(directory):
  return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


# === Existing outputs ===


def test_refuses_existing_weights_file(tmp_path, sources, capsys):
  target = str(tmp_path / "out" / "model.safetensors")
  assert convert(capsys, f"--from={sources['tf1']}", f"--to={target}")[0] == 0
  for name in ["config.json"] + HF_TOKENIZER_FILES:  # the weights alone are refused too
    os.remove(tmp_path / "out" / name)
  before = open(target, "rb").read()
  code, line = convert(capsys, f"--from={sources['tf1']}", f"--to={target}")
  assert code == 1
  assert line == (f"{PROGRAM}: error: --to={target}: {target} already exists; pass --overwrite "
                  "to replace it")
  assert open(target, "rb").read() == before
  assert files_in(tmp_path / "out") == ["model.safetensors"]


@pytest.mark.parametrize("target_format", ["hf", "tf1"])
def test_refuses_existing_config_beside_output(tmp_path, sources, capsys, target_format):
  """The config written beside the output is never replaced silently, though --to did not name
  it (config.json for hf, bert_config.json for tf1)."""
  out = tmp_path / "out"
  os.makedirs(out)
  if target_format == "hf":
    source, target, config_name = sources["tf1"], str(out / "model.safetensors"), "config.json"
  else:
    source, target, config_name = sources["hf"], str(out / "bert_model.ckpt"), "bert_config.json"
  (out / config_name).write_text("the user's own file\n")
  code, line = convert(capsys, f"--from={source}", f"--to={target}")
  assert code == 1
  assert line == (f"{PROGRAM}: error: --to={target}: {out / config_name} already exists; pass "
                  "--overwrite to replace it")
  assert (out / config_name).read_text() == "the user's own file\n"
  assert files_in(out) == [config_name]  # no weights were written either


@pytest.mark.parametrize("target_format", ["hf", "tf1"])
def test_overwrite_replaces_weights_and_config(tmp_path, sources, capsys, target_format):
  out = tmp_path / "out"
  os.makedirs(out)
  if target_format == "hf":
    source, target = sources["tf1"], str(out / "model.safetensors")
    stale = [out / "model.safetensors", out / "config.json"]
  else:
    source, target = sources["hf"], str(out / "bert_model.ckpt")
    stale = [out / "bert_model.ckpt.index", out / "bert_model.ckpt.data-00000-of-00001",
             out / "bert_config.json"]
  for path in stale:
    path.write_text("stale")
  assert convert(capsys, f"--from={source}", f"--to={target}", "--overwrite")[0] == 0
  # The hf source's tokenizer goes beside the tf1 output too: its vocab and casing.
  tokenizer_files = (HF_TOKENIZER_FILES if target_format == "hf"
                     else ["tokenizer_config.json", "vocab.txt"])
  assert files_in(out) == sorted([p.name for p in stale] + tokenizer_files)  # no temporaries
  values = checkpoints.read_weights(target)
  helpers.assert_same_weights(values, sources["weights"], rtol=0, atol=0)
  assert checkpoints.config_beside(target) == TINY


def test_failed_write_leaves_no_output_under_the_final_name(tmp_path, sources, capsys):
  out = tmp_path / "out"
  os.makedirs(out / "config.json")  # a folder where the config goes: renaming onto it fails
  target = str(out / "model.safetensors")
  code, line = convert(capsys, f"--from={sources['tf1']}", f"--to={target}", "--overwrite")
  assert code == 1
  assert line.startswith(f"{PROGRAM}: error: --to={target}: cannot write the output (")
  assert files_in(out) == ["config.json"]  # neither weights nor temporaries
  assert files_in(out / "config.json") == []


# === Bad inputs ===


def test_truncated_safetensors_names_the_file(tmp_path, sources, capsys):
  bad = tmp_path / "in" / "model.safetensors"
  os.makedirs(bad.parent)
  data = open(sources["hf"], "rb").read()
  bad.write_bytes(data[:len(data) // 2])
  target = str(tmp_path / "out" / "bert_model.ckpt")
  code, line = convert(capsys, f"--from={bad}", f"--to={target}",
                       f"--bert_config_file={sources['config']}")
  assert code == 1
  assert line.startswith(f"{PROGRAM}: error: --from={bad}: not a valid safetensors file (")
  assert files_in(tmp_path / "out") == []


@pytest.mark.parametrize("from_format", [None, "tf1"])
def test_non_checkpoint_file_names_the_flag(tmp_path, sources, capsys, from_format):
  bad = tmp_path / "notes.txt"
  bad.write_text("not a checkpoint\n" * 100)
  args = [f"--from={bad}", f"--to={tmp_path / 'out' / 'model.safetensors'}",
          f"--bert_config_file={sources['config']}"]
  code, line = convert(capsys, *args, *([f"--from_format={from_format}"] if from_format else []))
  assert code == 1
  assert line.startswith(f"{PROGRAM}: error: --from={bad}: expected a TF checkpoint prefix")
  assert "found a file that is neither a TF checkpoint, safetensors nor a .keras model" in line
  assert files_in(tmp_path / "out") == []


def test_wrong_from_format_says_what_was_expected_and_found(tmp_path, sources, capsys):
  code, line = convert(capsys, f"--from={sources['tf1']}", "--from_format=hf",
                       f"--to={tmp_path / 'out' / 'bert_model.ckpt'}",
                       f"--bert_config_file={sources['config']}")
  assert code == 1
  assert line.startswith(f"{PROGRAM}: error: --from={sources['tf1']}: expected a Hugging Face "
                         ".safetensors file for --from_format=hf, found a TF checkpoint prefix")


@pytest.mark.parametrize("name", ["missing.ckpt", "missing.safetensors"])
def test_missing_from_names_the_flag(tmp_path, capsys, name):
  missing = tmp_path / name
  code, line = convert(capsys, f"--from={missing}", f"--to={tmp_path / 'out' / 'x.keras'}")
  assert code == 1
  assert line.startswith(f"{PROGRAM}: error: --from={missing}: ")
  assert "not found" in line


def test_a_sharded_models_parts_are_named_as_such(tmp_path, capsys):
  """Its folder, its index or one of its shards: one line saying what it is."""
  folder = tmp_path / "sharded"
  folder.mkdir()
  (folder / "model.safetensors.index.json").write_text('{"weight_map": {}}')
  (folder / "model-00001-of-00002.safetensors").write_bytes(b"x")
  target = f"--to={tmp_path / 'out' / 'model.safetensors'}"
  code, line = convert(capsys, f"--from={folder}", target)
  assert code == 1 and "holds sharded safetensors (model.safetensors.index.json)" in line
  for part in ("model.safetensors.index.json", "model-00001-of-00002.safetensors"):
    code, line = convert(capsys, f"--from={folder / part}", target)
    assert (code, line) == (1, f"{PROGRAM}: error: --from={folder / part} is part of a sharded "
                               "model (its weights split across several .safetensors files), "
                               "which is not read here; save the model as one "
                               "model.safetensors")
  assert not (tmp_path / "out").exists()


def test_unwritable_output_folder_is_refused_before_reading(tmp_path, sources, capsys):
  blocker = tmp_path / "a_file"
  blocker.write_text("x")
  target = f"{blocker}/x.safetensors"
  code, line = convert(capsys, f"--from={sources['tf1']}", f"--to={target}")
  assert code == 1
  assert line == (f"{PROGRAM}: error: --to={target}: cannot create the output folder {blocker}: "
                  f"{blocker} is a file, not a folder")


def test_config_file_errors_name_the_flag(tmp_path, sources, capsys):
  target = f"--to={tmp_path / 'out' / 'model.safetensors'}"
  missing = tmp_path / "missing.json"
  code, line = convert(capsys, f"--from={sources['tf1']}", target, f"--bert_config_file={missing}")
  assert (code, line) == (1, f"{PROGRAM}: error: --bert_config_file={missing}: file not found")
  invalid = tmp_path / "invalid.json"
  invalid.write_text("{not json")
  code, line = convert(capsys, f"--from={sources['tf1']}", target, f"--bert_config_file={invalid}")
  assert code == 1
  assert line.startswith(f"{PROGRAM}: error: --bert_config_file={invalid}: not valid JSON (")
  # No config beside the input and none given: a usage error naming both flags.
  bare = tmp_path / "bare.safetensors"
  bare.write_bytes(open(sources["hf"], "rb").read())
  code, line = convert(capsys, f"--from={bare}", target)
  assert (code, line) == (2, f"{PROGRAM}: usage error: --from={bare}: no config.json beside it; "
                          "pass --bert_config_file (see --help)")
  assert files_in(tmp_path / "out") == []


@pytest.mark.parametrize("changes, sizes", [
    (dict(num_hidden_layers=2), "has num_hidden_layers 1, the config 2"),
    (dict(hidden_size=8, num_attention_heads=2), "has hidden_size 16, the config 8"),
])
def test_weights_of_another_size_name_the_sizes_that_differ(tmp_path, sources, capsys, changes,
                                                            sizes):
  """A config of another size: the sizes that differ and a few variables, in one short line
  (not every variable, nor a --drop_head that cannot help)."""
  config = tmp_path / "other.json"
  TINY.replace(**changes).to_json_file(str(config))
  code, line = convert(capsys, f"--from={sources['tf1']}", f"--bert_config_file={config}",
                       f"--to={tmp_path / 'out' / 'model.safetensors'}")
  assert code == 1
  assert line.startswith(f"{PROGRAM}: error: --from={sources['tf1']}: the weights do not fit "
                         f"--bert_config_file={config} ("), line
  assert sizes in line and len(line) < 800 and "--drop_head" not in line, line
  if "num_hidden_layers" not in changes:
    return
  # The source has more layers than the config: its extra layers are named, not dropped.
  bigger = tmp_path / "bigger"
  big = TINY.replace(num_hidden_layers=2)
  prefix = checkpoints.write_tf1_checkpoint(
      helpers.random_original_weights(big, np.random.default_rng(4), heads=False),
      str(bigger / "bert_model.ckpt"))
  (bigger / "vocab.txt").write_text("\n".join(helpers.VOCAB_TOKENS[:TINY.vocab_size]) + "\n")
  code, line = convert(capsys, f"--from={prefix}", f"--bert_config_file={sources['config']}",
                       f"--to={tmp_path / 'out2' / 'model.safetensors'}", "--drop_head",
                       "--do_lower_case=true")
  assert code == 1 and "it has num_hidden_layers 2, the config 1" in line, line
  assert "encoder variables left over, e.g. bert/encoder/layer_1/" in line, line
  assert files_in(tmp_path / "out") == files_in(tmp_path / "out2") == []
