"""A folder knows its tokenizer in every format: a conversion writes the model's vocab.txt and
its casing beside the output (tf1 and keras as well as hf), so that every chain of conversions
(hf -> tf1 -> hf, ...) keeps the tokenizer without --vocab_file or --do_lower_case.
"""

import itertools
import json
import os

import numpy as np
import pytest

from bert_tf import convert_checkpoint
from bert_tf.model import checkpoints
from bert_tf.model import conversion
from bert_tf.model import provenance
from tests import helpers

PROGRAM = "convert_checkpoint"
CONFIG = helpers.tiny_config(vocab_size=20, hidden_size=16, intermediate_size=8,
                             num_hidden_layers=1, max_position_embeddings=8)
# A cased vocab: the casing a folder records must survive each hop, and True (the default of
# the commands) would pass even if it were lost.
VOCAB_TOKENS = helpers.VOCAB_TOKENS[:CONFIG.vocab_size]
WRITABLE = ("tf1", "hf", "keras")
NAMES = {"tf1": "bert_model.ckpt", "hf": "model.safetensors", "keras": "model.keras"}


def convert(capsys, *args):
  """Runs the command in-process; returns (exit code, its error line or stdout)."""
  capsys.readouterr()
  code = helpers.run_cli_in_process(convert_checkpoint, [PROGRAM, *args])
  captured = capsys.readouterr()
  assert "Traceback" not in captured.err
  lines = [line for line in captured.err.splitlines() if line.startswith(f"{PROGRAM}: ")]
  return code, (lines[0] if lines else captured.out)


def recorded(folder):
  """(the vocab's tokens, the casing) a folder records, as the commands read them."""
  found = provenance.recorded_tokenizer(os.path.join(folder, "any_checkpoint"))
  vocab = provenance.recorded_vocab(os.path.join(folder, "any_checkpoint"))
  if vocab is None:
    return None, found.get("do_lower_case")
  with open(vocab, encoding="utf-8") as f:
    return f.read().splitlines(), found.get("do_lower_case")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
  """A cased model in each writable format, each made from the same weights: a tf1 folder
  written by hand (vocab.txt, and the casing given once, on the first conversion), then the
  command's hf and keras outputs of it."""
  root = tmp_path_factory.mktemp("sources")
  values = helpers.random_original_weights(CONFIG, np.random.default_rng(3), heads=False)
  origin = root / "origin"
  os.makedirs(origin)
  prefix = checkpoints.write_tf1_checkpoint(values, str(origin / "bert_model.ckpt"))
  CONFIG.to_json_file(str(origin / "bert_config.json"))
  (origin / "vocab.txt").write_text("\n".join(VOCAB_TOKENS) + "\n")
  paths = {}
  for target_format in WRITABLE:
    target = root / target_format / NAMES[target_format]
    code = helpers.run_cli_in_process(convert_checkpoint, [
        PROGRAM, f"--from={prefix}", f"--to={target}", "--do_lower_case=false"])
    assert code == 0, target_format
    paths[target_format] = str(target)
  return paths


@pytest.mark.slow
@pytest.mark.parametrize("source_format, target_format",
                         list(itertools.product(WRITABLE, WRITABLE)))
def test_every_conversion_keeps_the_tokenizer(sources, source_format, target_format, tmp_path,
                                              capsys):
  source = sources[source_format]
  assert recorded(os.path.dirname(source)) == (VOCAB_TOKENS, False)
  target = tmp_path / "out" / NAMES[target_format]
  code, out = convert(capsys, f"--from={source}", f"--to={target}")
  assert code == 0, out
  assert recorded(tmp_path / "out") == (VOCAB_TOKENS, False)
  # And on to a Hugging Face folder, which needs the tokenizer in full.
  again = tmp_path / "again" / "model.safetensors"
  code, out = convert(capsys, f"--from={target}", f"--to={again}")
  assert code == 0, out
  tokenizer_config = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
  assert tokenizer_config["do_lower_case"] is False
  assert (tmp_path / "again" / "vocab.txt").read_text().splitlines() == VOCAB_TOKENS


@pytest.mark.slow
def test_the_tf1_folder_is_the_originals_layout_with_its_casing(sources):
  folder = os.path.dirname(sources["tf1"])
  assert sorted(os.listdir(folder)) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
      "tokenizer_config.json", "vocab.txt"]
  # A cased folder refuses an uncased run, as the original's cased release folders do.
  with pytest.raises(provenance.TokenizerMismatchError, match="do_lower_case=False"):
    provenance.check_tokenizer(os.path.join(folder, "vocab.txt"), True,
                               checkpoints=[sources["tf1"]])


def test_without_a_vocab_a_tf1_output_has_none_and_says_so(tmp_path, capsys, caplog):
  values = helpers.random_original_weights(CONFIG, np.random.default_rng(4), heads=False)
  os.makedirs(tmp_path / "bare")
  prefix = checkpoints.write_tf1_checkpoint(values, str(tmp_path / "bare" / "model.ckpt"))
  CONFIG.to_json_file(str(tmp_path / "bare" / "bert_config.json"))
  target = tmp_path / "out" / "bert_model.ckpt"
  code, out = convert(capsys, f"--from={prefix}", f"--to={target}")
  assert code == 0, out
  assert sorted(os.listdir(tmp_path / "out")) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]
  assert "no vocab.txt beside it, so none is written beside the output" in caplog.text
  # With --vocab_file but no casing: the vocab goes beside, the casing stays unknown.
  vocab = tmp_path / "my_vocab.txt"
  vocab.write_text("\n".join(VOCAB_TOKENS) + "\n")
  code, out = convert(capsys, f"--from={prefix}", f"--to={tmp_path / 'out2' / 'bert_model.ckpt'}",
                      f"--vocab_file={vocab}")
  assert code == 0, out
  assert recorded(tmp_path / "out2") == (VOCAB_TOKENS, None)
  assert not os.path.exists(tmp_path / "out2" / "tokenizer_config.json")


def test_tokenizer_output_paths_follow_what_is_known():
  cased = conversion.Tokenizer("v.txt", False)
  unknown = conversion.Tokenizer("v.txt", None)
  assert conversion.tokenizer_output_paths("d/m.ckpt", "tf1") == []
  assert conversion.tokenizer_output_paths("d/m.ckpt", "tf1", cased) == [
      "d/vocab.txt", "d/tokenizer_config.json"]
  assert conversion.tokenizer_output_paths("d/m.keras", "keras", unknown) == ["d/vocab.txt"]
  assert conversion.tokenizer_output_paths("d/model.safetensors", "hf") == [
      "d/vocab.txt", "d/tokenizer_config.json", "d/special_tokens_map.json"]
