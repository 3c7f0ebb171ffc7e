"""Every label list can be given (issue 38, point 6): run_ner's --labels_file and
run_classifier's --label_list_file read the labels one per line, so that tags a comma-separated
flag cannot hold (the Penn Treebank's `,`, `:`, `''`, two backquotes) can be given."""

import json
import os
import subprocess
import sys

from absl import flags
import pytest

from bert_tf import cli
from bert_tf import run_classifier
from bert_tf import run_ner
from tests import helpers

PTB = os.path.join(helpers.TEST_DATA, "ptb_pos_tags.txt")
VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
PUNCTUATION_TAGS = ["$", "#", "``", "''", "-LRB-", "-RRB-", ",", ".", ":"]


def ptb_tags():
  with open(PTB, encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f]


def parsed(module, *args):
  """The module's flags, defined on a fresh FlagValues and parsed from args."""
  flag_values = flags.FlagValues()
  module.define_flags(flag_values)
  flag_values([module.__name__.rsplit(".", 1)[-1], *args])
  return flag_values


def test_the_fixture_is_the_penn_treebank_tag_set():
  tags = ptb_tags()
  assert len(tags) == len(set(tags)) == 45
  assert tags[-len(PUNCTUATION_TAGS):] == PUNCTUATION_TAGS
  assert {"NN", "NNP", "PRP$", "WP$", "VBZ", "SYM", "LS"} <= set(tags)


def test_a_comma_separated_flag_cannot_hold_them():
  """Why the file: absl's list flag reads the tag `,` as two empty labels, and a `"` not at
  all."""
  tags = ptb_tags()
  f = parsed(run_ner, "--vocab_file=v", "--output_dir=o", "--labels=" + ",".join(tags))
  assert list(f.labels) != tags and "," not in f.labels
  with pytest.raises(flags.IllegalFlagValueError, match="comma separated list"):
    parsed(run_ner, "--vocab_file=v", "--output_dir=o", '--labels=NN,"')


def test_run_ner_settings_take_the_labels_file():
  f = parsed(run_ner, f"--vocab_file={VOCAB}", "--output_dir=out", f"--labels_file={PTB}")
  assert run_ner.settings_from_flags(f).labels == tuple(ptb_tags())
  f = parsed(run_ner, f"--vocab_file={VOCAB}", "--output_dir=out", "--labels=O,B-PER,I-PER")
  assert run_ner.settings_from_flags(f).labels == ("O", "B-PER", "I-PER")
  f = parsed(run_ner, f"--vocab_file={VOCAB}", "--output_dir=out")
  assert run_ner.settings_from_flags(f).labels == ()


def test_run_classifier_settings_take_the_label_list_file(tmp_path):
  labels = tmp_path / "labels.txt"
  labels.write_text('very bad, awful\n"fine"\n\n  it\'s ok  \r\ngood\n')  # blank line, CRLF
  common = ["--task_name=generic", "--data_dir=data", f"--vocab_file={VOCAB}", "--output_dir=out"]
  f = parsed(run_classifier, *common, f"--label_list_file={labels}")
  assert run_classifier.settings_from_flags(f).label_list == (
      "very bad, awful", '"fine"', "it's ok", "good")
  f = parsed(run_classifier, *common, f"--label_list_file={PTB}")
  assert run_classifier.settings_from_flags(f).label_list == tuple(ptb_tags())
  f = parsed(run_classifier, *common, "--label_list=a,b")
  assert run_classifier.settings_from_flags(f).label_list == ("a", "b")


@pytest.mark.parametrize("name", ["labels", "label_list"])
def test_a_bad_label_file_is_one_error_naming_flag_and_file(tmp_path, name):
  flag = f"--{name}_file"
  missing = str(tmp_path / "missing.txt")
  with pytest.raises(FileNotFoundError, match=f"^{flag}={missing}: file not found$"):
    cli.read_label_file(missing, flag)
  with pytest.raises(IsADirectoryError, match=f"^{flag}={tmp_path}: is a folder"):
    cli.read_label_file(str(tmp_path), flag)
  empty = tmp_path / "empty.txt"
  for text in ("", "\n  \n\n"):
    empty.write_text(text)
    with pytest.raises(ValueError, match=f"^{flag}={empty}: no labels in it"):
      cli.read_label_file(str(empty), flag)
  twice = tmp_path / "twice.txt"
  twice.write_text("NN\n,\nVB\n\n, \n")
  with pytest.raises(ValueError, match=f"^{flag}={twice}:5: label ',' is given twice "
                     r"\(first on line 2\)$"):
    cli.read_label_file(str(twice), flag)
  latin1 = tmp_path / "latin1.txt"
  latin1.write_bytes("caf\u00e9\n".encode("latin-1"))
  with pytest.raises(ValueError, match=f"^{flag}={latin1}: not UTF-8"):
    cli.read_label_file(str(latin1), flag)
  bom = tmp_path / "bom.txt"
  bom.write_bytes("\ufeffNN\nVB\n".encode("utf-8"))
  assert cli.read_label_file(str(bom), flag) == ("NN", "VB")


def test_the_list_and_the_file_contradict_each_other():
  f = parsed(run_ner, f"--vocab_file={VOCAB}", "--output_dir=out", "--labels=O",
             f"--labels_file={PTB}")
  with pytest.raises(cli.UsageError, match="--labels and --labels_file contradict"):
    run_ner.settings_from_flags(f)


def test_the_commands_report_a_bad_label_file_in_one_line(tmp_path, capsys):
  config_file = tmp_path / "bert_config.json"
  helpers.tiny_config().to_json_file(str(config_file))
  twice = tmp_path / "tags.txt"
  twice.write_text("NN\nVB\nNN\n")
  base = ["run_ner", f"--vocab_file={VOCAB}", f"--bert_config_file={config_file}",
          f"--output_dir={tmp_path / 'out'}", "--do_train", f"--data_dir={tmp_path}"]
  assert helpers.run_cli_in_process(run_ner, base + [f"--labels_file={twice}"]) == 1
  err = capsys.readouterr().err
  assert f"run_ner: error: --labels_file={twice}:3: label 'NN' is given twice (first on line 1)" \
      in err.splitlines()
  missing = tmp_path / "none.txt"
  classifier = ["run_classifier", "--task_name=generic", f"--data_dir={tmp_path}",
                f"--vocab_file={VOCAB}", f"--bert_config_file={config_file}",
                f"--output_dir={tmp_path / 'out'}", "--do_train"]
  assert helpers.run_cli_in_process(run_classifier,
                                    classifier + [f"--label_list_file={missing}"]) == 1
  assert (f"run_classifier: error: --label_list_file={missing}: file not found"
          in capsys.readouterr().err.splitlines())
  assert helpers.run_cli_in_process(
      run_classifier, classifier + ["--label_list=a", f"--label_list_file={PTB}"]) == 2
  assert "--label_list and --label_list_file contradict" in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


# === The command line, end to end ===

# Hand-tagged sentences (Penn Treebank tags). The dev file holds tags the training file lacks
# (`` '' -LRB- -RRB- $ # : and others): with the full tag set given, the run trains and scores
# them; without it, it would stop at the first.
TRAIN = """The DT
cat NN
sat VBD
on IN
the DT
mat NN
, ,
and CC
it PRP
slept VBD
. .

She PRP
quickly RB
reads VBZ
two CD
old JJ
books NNS
. .
"""
DEV = """He PRP
said VBD
`` ``
yes UH
'' ''
: :
prices NNS
-LRB- -LRB-
$ $
5 CD
-RRB- -RRB-
rose VBD
# #
. .
"""


@pytest.mark.slow
def test_run_ner_trains_a_penn_treebank_tagger_from_the_command_line(tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.txt").write_text(TRAIN)
  (data / "dev.txt").write_text(DEV)
  config_file = tmp_path / "bert_config.json"
  helpers.tiny_config(vocab_size=30522, hidden_size=16, intermediate_size=8,
                      num_hidden_layers=1, max_position_embeddings=32).to_json_file(
                          str(config_file))
  out = tmp_path / "out"
  argv = [sys.executable, "-m", "bert_tf.run_ner", f"--data_dir={data}", f"--vocab_file={VOCAB}",
          f"--bert_config_file={config_file}", f"--labels_file={PTB}", "--do_train",
          "--do_eval", "--max_seq_length=32", "--train_batch_size=2", "--num_train_epochs=1",
          "--export=false", f"--output_dir={out}"]
  done = subprocess.run(argv, env=helpers.subprocess_env(), capture_output=True, text=True,
                        timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  info = json.loads((out / "task_info.json").read_text())
  assert info["labels"] == ptb_tags() and info["tag_scheme"] == "plain"
  lines = [line.split(" ") for line in
           (out / "eval_predictions.txt").read_text().splitlines() if line]
  assert [gold for _, gold, _ in lines] == [line.split(" ")[1] for line in DEV.splitlines()]
  assert {predicted for _, _, predicted in lines} <= set(ptb_tags())
  assert (out / "eval_results.txt").exists()
