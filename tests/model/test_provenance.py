"""What a model folder records (bert_tf.model.provenance): the one table of head kinds, and the
one tokenizer check with its one message."""

import glob
import importlib
import inspect
import json
import os

import numpy as np
import pytest

from bert_tf import record_schema
from bert_tf.model import checkpoints
from bert_tf import task_heads
from bert_tf.model import conversion
from bert_tf.model import head_specs
from bert_tf.model import heads
from bert_tf.model import provenance
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

SMALL = helpers.tiny_config(vocab_size=20, hidden_size=16, intermediate_size=8,
                            num_hidden_layers=1, max_position_embeddings=8)


def _head_builders():
  """heads.build_<kind>_model for every head heads.py builds (the encoder's is not one)."""
  return {name: builder for name, builder in vars(heads).items()
          if name.startswith("build_") and name.endswith("_model") and callable(builder)}


def test_every_head_kind_is_in_the_one_table():
  """A head that heads.py or a registered head (bert_tf/task_heads.py) builds, checkpoints
  recognises or conversion rebuilds, or that a task's run trains, without its row in
  provenance.HEAD_KINDS fails here (CONTRIBUTING.md, "Adding a task": the head kind is added in
  one place)."""
  built = set()
  for name, builder in _head_builders().items():
    required = [p for p in inspect.signature(builder).parameters.values()
                if p.default is inspect.Parameter.empty]
    model = builder(SMALL, *([2] * (len(required) - 1)))
    kind = checkpoints.model_head(model)
    assert kind in provenance.BUILT_IN_HEAD_KINDS, f"heads.{name} builds a {kind!r} head"
    built.add(kind)
  assert built == set(provenance.BUILT_IN_HEAD_KINDS)
  for spec in head_specs.registered():
    assert checkpoints.model_head(spec.build(SMALL, 1)) == spec.kind
    built.add(spec.kind)
  assert built == set(provenance.HEAD_KINDS)
  values = {"output_bias": np.zeros(2, np.float32)}
  for kind, head in provenance.HEAD_KINDS.items():
    assert checkpoints.HF_ARCHITECTURES[kind] == head.hf_architecture
    assert checkpoints.model_head(conversion.build_head_model(SMALL, kind, values)) == kind
    assert provenance.head_of({"head": kind}) == kind
    if head.fine_tuned:
      assert provenance.hf_task_info({"architectures": [head.hf_architecture]})["head"] == kind
  runs = sorted(glob.glob(os.path.join(helpers.REPO_ROOT, "bert_tf", "tasks", "*", "run.py")))
  modules = [importlib.import_module(f"bert_tf.tasks.{os.path.basename(os.path.dirname(p))}.run")
             for p in runs]
  trained = [module for module in modules if hasattr(module, "TASK")]  # features trains none
  assert len(trained) >= 3
  for module in trained:
    head = module.TASK.head
    assert head in provenance.FINE_TUNED_HEADS, f"{module.__name__} trains {head!r}"
    task_name = getattr(module, "TASK_NAME", "any_classifier_task")
    assert provenance.head_of({"task_name": task_name}) == head, module.__name__
    assert provenance.fine_tuned_head({"task_name": task_name}) == head


def test_the_registered_heads():
  """Each module bert_tf/task_heads.py names is a task package's and defines one HeadSpec; a
  head that takes another's kind, Hugging Face class or task_name is refused."""
  specs = head_specs.registered()
  assert len(specs) == len(task_heads.HEAD_MODULES) >= 1
  for module, spec in zip(task_heads.HEAD_MODULES, specs):
    assert module.startswith("bert_tf.tasks.") and module.count(".") == 3, module
    assert provenance.HEAD_KINDS[spec.kind] is spec.facts
    assert head_specs.spec_of(spec.kind) is spec
  assert head_specs.spec_of(provenance.PRETRAINING) is None
  assert set(provenance.OUTPUT_WEIGHTS_HEADS) >= {classifier_head.CLASSIFIER, tagging_head.TAGGER}
  assert squad_head.SQUAD not in provenance.OUTPUT_WEIGHTS_HEADS
  assert provenance.PRETRAINING not in provenance.FINE_TUNED_HEADS
  assert provenance.default_task_head() == classifier_head.CLASSIFIER
  spec = specs[-1]
  for facts, taken in ((provenance.HeadKind("BertForSequenceClassification"),
                        "Hugging Face class 'BertForSequenceClassification'"),
                       (provenance.HeadKind("BertForNew", task_names=("ner",)),
                        "task_name 'ner'"),
                       (provenance.HeadKind("BertForNew", default=True), "default")):
    with pytest.raises(ValueError, match=f"takes the {taken} of another head"):
      provenance._check_registered(specs + (head_specs.HeadSpec(  # pylint: disable=protected-access
          "new", facts, spec.weights, spec.build, spec.recognise),))
  with pytest.raises(ValueError, match="takes the kind 'squad'"):
    provenance._check_registered(specs + (  # pylint: disable=protected-access
        head_specs.HeadSpec(squad_head.SQUAD, spec.facts, spec.weights, spec.build,
                            spec.recognise),))
  with pytest.raises(ValueError, match="takes the kind 'pretraining'"):
    provenance._check_registered([  # pylint: disable=protected-access
        head_specs.HeadSpec(provenance.PRETRAINING, spec.facts, spec.weights, spec.build,
                            spec.recognise)])


def test_the_registry_is_read_when_first_asked(monkeypatch):
  """The registered modules are imported when the head kinds are first read, and one that
  defines no HeadSpec is refused naming it."""
  monkeypatch.setattr(provenance, "_registered", None)
  monkeypatch.setattr(task_heads, "HEAD_MODULES", ("bert_tf.model.heads",))
  with pytest.raises(ValueError, match=r"^bert_tf.model.heads \(bert_tf/task_heads.py\) defines "
                     "no HEAD_SPEC"):
    provenance.registered_heads()


def test_heads_of_task_infos():
  assert provenance.head_of(None) is None and provenance.head_of({}) is None
  assert provenance.head_of({"head": "nonesuch", "task_name": "ner"}) is None
  assert provenance.head_of({"head": provenance.PRETRAINING}) == provenance.PRETRAINING
  assert provenance.fine_tuned_head({"head": provenance.PRETRAINING}) is None
  assert provenance.head_of({"task_name": "mrpc"}) == classifier_head.CLASSIFIER
  assert checkpoints.head_of_task_info is provenance.head_of


def test_one_check_one_message_for_every_record(tmp_path):
  vocab = helpers.write_vocab(str(tmp_path / "vocab.txt"))
  other = tmp_path / "other" / "vocab.txt"
  other.parent.mkdir()
  other.write_text("\n".join(helpers.VOCAB_TOKENS[::-1]) + "\n")
  metadata = dict(do_lower_case=True, vocab_md5=record_schema.vocab_checksum(vocab))
  run = tmp_path / "run"
  run.mkdir()
  provenance.write_task_info(str(run), dict(task_name="ner", do_lower_case=False))
  # Every contradiction in one line: the data's, the model's, each naming flag, values, file.
  with pytest.raises(provenance.TokenizerMismatchError) as error:
    provenance.check_tokenizer(str(other), True, checkpoints=[str(run), None],
                               data_metadata=metadata, data_source="data.metadata.json")
  message = str(error.value)
  assert f"--vocab_file={other} (md5 " in message
  assert "is not the vocab the data was made with (md5 " in message
  assert "--do_lower_case=True but the model was trained with do_lower_case=False (" \
      f"{run / 'task_info.json'}); pass --do_lower_case=False" in message
  assert message.endswith("(--allow_tokenizer_mismatch overrides this check)")
  # Allowed: a warning; never a vocab larger than the config.
  provenance.check_tokenizer(str(other), True, checkpoints=[str(run)], data_metadata=metadata,
                             allow_mismatch=True)
  with pytest.raises(provenance.TokenizerMismatchError,
                     match=r"has 64 tokens but the config's vocab_size is 20"):
    provenance.check_tokenizer(vocab, None, vocab_size=20, allow_mismatch=True)
  # Counted as load_vocab reads it: only "\n" ends a line (a token may hold U+2028), and a
  # blank last line is the token "" that no text produces.
  odd = tmp_path / "odd_vocab.txt"
  odd.write_text(open(vocab, encoding="utf-8").read().replace("\n", "\u2028\n", 1) + "\n",
                 encoding="utf-8")
  provenance.check_tokenizer(str(odd), None, vocab_size=64)
  provenance.check_tokenizer(vocab, False, checkpoints=[str(run)], data_metadata=dict(
      metadata, do_lower_case=False), vocab_size=64)
  # A Hugging Face folder's casing beside the vocab, said once when it is also the checkpoint's.
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(do_lower_case=True)))
  with pytest.raises(provenance.TokenizerMismatchError) as error:
    provenance.check_tokenizer(vocab, False, checkpoints=[vocab], override_flag=None)
  assert str(error.value) == (
      "--do_lower_case=False but the model was trained with do_lower_case=True "
      f"({tmp_path / 'tokenizer_config.json'}); pass --do_lower_case=True")


def test_the_vocab_a_folder_records(tmp_path):
  vocab = helpers.write_vocab(str(tmp_path / "vocab.txt"))
  md5 = record_schema.vocab_checksum(vocab)
  assert provenance.resolve_vocab_file(str(tmp_path)) == vocab
  assert provenance.recorded_vocab(str(tmp_path / "ckpt-2")) == vocab
  assert provenance.recorded_vocab(str(tmp_path / "none" / "ckpt-2")) is None
  assert provenance.data_vocab(dict(vocab_md5=md5, flags=dict(vocab_file=vocab))) == vocab
  assert provenance.data_vocab(dict(vocab_md5="0" * 32, flags=dict(vocab_file=vocab))) is None
  assert provenance.data_vocab(dict(vocab_md5=md5, flags={})) is None
  assert provenance.data_vocab(None) is None
  run = tmp_path / "run"
  run.mkdir()
  assert provenance.record_vocab(str(run), vocab) == str(run / "vocab.txt")
  assert record_schema.vocab_checksum(str(run / "vocab.txt")) == md5
