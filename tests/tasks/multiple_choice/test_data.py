"""Multiple-choice input files (SWAG's CSV, the JSONL layout), their errors, and the records."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.tasks import pairs
from bert_tf.tasks.multiple_choice import data as mc_data
from bert_tf.training import input_pipeline
from tests import helpers

MC = os.path.join(helpers.TEST_DATA, "multiple_choice")
VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
HEADER = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer(VOCAB, do_lower_case=True)


def test_swag_csv_and_the_same_examples_as_jsonl():
  train = mc_data.read_examples(os.path.join(MC, "train.csv"))
  assert len(train) == 160 and all(len(e.endings) == 4 for e in train)
  assert sorted({e.label for e in train}) == [0, 1, 2, 3]
  first = train[0]  # the fixture's first row (a quoted ending holding a `"`)
  assert first.context == "I am very little disposed to grant a tenant of Kellynch"
  assert first.question == "Hall any" and first.label == 3
  assert first.endings[3] == 'extraordinary favour , I assure you , be he sailor or soldier . "'
  # Hugging Face's run_swag: the second segment is sent2 + " " + ending.
  assert first.choice_text(first.endings[1]) == "Hall any not possible for anyone ."
  csv_examples = mc_data.read_examples(os.path.join(MC, "val.csv"))
  jsonl_examples = mc_data.read_examples(os.path.join(MC, "val.jsonl"))
  assert len(csv_examples) == len(jsonl_examples) == 60
  for a, b in zip(csv_examples, jsonl_examples):
    assert (a.context, a.question, a.endings, a.label) == (b.context, b.question, b.endings,
                                                          b.label)


def test_predict_files_need_no_label(tmp_path):
  test = mc_data.read_examples(os.path.join(MC, "test.csv"), labelled=None)
  assert len(test) == 40 and all(e.label is None for e in test)
  with pytest.raises(mc_data.MultipleChoiceFormatError,
                     match=r"test\.csv:1: the header lacks label$"):
    mc_data.read_examples(os.path.join(MC, "test.csv"))
  path = tmp_path / "mixed.jsonl"
  path.write_text('{"context": "a", "choices": ["b", "c"], "label": 1}\n'
                  '{"context": "a", "choices": ["b", "c"]}\n')
  with pytest.raises(mc_data.MultipleChoiceFormatError,
                     match=r"mixed\.jsonl:2: has no label, unlike line 1 \(a predict file"):
    mc_data.read_examples(str(path), labelled=None)


def test_lines_are_the_files_own_and_any_utf8_reads(tmp_path):
  """A CSV row whose quoted cells span lines is named (guid, errors) by the line it starts on;
  a byte-order mark, CRLF line ends and U+2028 inside a JSON string are read as text."""
  path = tmp_path / "swag.csv"
  path.write_bytes(("\ufeffsent1,sent2,ending0,ending1,label\r\n"
                    '"a\r\nlong, context",He,"runs\r\naway.",sits.,1\r\n'
                    "b,She,walks.,sings.,0\r\n"
                    "c,It,falls.,\"rises\nhigh.\",5\r\n").encode("utf-8"))
  with pytest.raises(mc_data.MultipleChoiceFormatError, match=r"swag\.csv:6: label 5 is outside"):
    mc_data.read_examples(str(path))
  path.write_bytes(path.read_bytes().replace(b",5\r\n", b",1\r\n"))
  examples = mc_data.read_examples(str(path))
  assert [(e.guid, e.line) for e in examples] == [("2", 2), ("5", 5), ("6", 6)]
  assert examples[0].context == "a\r\nlong, context" and examples[2].endings[1] == "rises\nhigh."
  jsonl = tmp_path / "a.jsonl"
  jsonl.write_bytes(("\ufeff" + json.dumps(dict(context="x\u2028y", choices=["a", "b"]),
                                            ensure_ascii=False) + "\n").encode("utf-8"))
  (example,) = mc_data.read_examples(str(jsonl), labelled=None)
  assert example.context == "x\u2028y" and example.guid == "1"
  jsonl.write_bytes(b'{"context": "x", "choices": ["a", "b"]}\n{"context": "\xff"}\n')
  with pytest.raises(mc_data.MultipleChoiceFormatError, match=r"a\.jsonl:2: invalid UTF-8"):
    mc_data.read_examples(str(jsonl), labelled=None)
  jsonl.write_text('{"id": "a\\tb", "context": "x", "choices": ["a", "b"]}\n')
  with pytest.raises(mc_data.MultipleChoiceFormatError,
                     match=r"a\.jsonl:1: 'id' 'a\\tb' holds a tab or line break"):
    mc_data.read_examples(str(jsonl), labelled=None)


def test_any_fixed_number_of_choices(tmp_path):
  path = tmp_path / "five.jsonl"
  path.write_text("".join(json.dumps(dict(context=f"c{i}", choices=list("abcde"), label=4))
                          + "\n" for i in range(3)))
  examples = mc_data.read_examples(str(path))
  assert mc_data.num_choices_of(examples) == 5 and examples[0].question == ""
  assert examples[0].choice_text("e") == "e"
  two = tmp_path / "two.csv"
  two.write_text("sent1,sent2,ending0,ending1,label\nA man,He,sits.,runs.,1\n")
  (example,) = mc_data.read_examples(str(two))
  assert example.endings == ("sits.", "runs.") and example.label == 1


@pytest.mark.parametrize("name,text,message", [
    ("a.jsonl", '{"context": "x", "choices": ["a", "b"], "label": 0}\n'
     '{"context": "x", "choices": ["a", "b", "c"], "label": 0}\n',
     r"a\.jsonl:2: 3 choices, but the file's first example has 2"),
    ("a.jsonl", '{"context": "x", "choices": ["a", "b"], "label": 2}\n',
     r"a\.jsonl:1: label 2 is outside 0\.\.1 \(2 choices\)"),
    ("a.jsonl", '{"context": "x", "choices": ["a", "b"], "label": "first"}\n',
     r"a\.jsonl:1: label 'first' is not a choice index"),
    ("a.jsonl", '\n{"context": "x", "choices": ["a", "b"], "label": 0\n',
     r"a\.jsonl:2: not JSON: Expecting ',' delimiter \(column 51\)"),
    ("a.jsonl", '{"choices": ["a", "b"], "label": 0}\n',
     r"a\.jsonl:1: 'context' must be a string, got nothing"),
    ("a.jsonl", '{"context": "x", "choices": ["a", 3], "label": 0}\n',
     r"a\.jsonl:1: 'choices' must be a list of strings"),
    ("a.jsonl", '{"context": "x", "choices": ["a"], "label": 0}\n',
     r"a\.jsonl:1: 1 choices; at least 2 are needed"),
    ("a.jsonl", '{"context": "x", "choices": ["a", "b"]}\n',
     r"a\.jsonl:1: no label \(training and eval files need one\)"),
    ("a.csv", "sent1,ending0,ending1,label\nx,a,b,0\n", r"a\.csv:1: the header lacks sent2$"),
    ("a.csv", "sent1,sent2,ending0,label\nx,y,a,0\n",
     r"a\.csv:1: the header lacks ending0\.\.endingN \(at least two, numbered from 0\)"),
    ("a.csv", "sent1,sent2,ending0,ending2,label\nx,y,a,b,0\n",
     r"a\.csv:1: the header lacks ending0\.\.endingN"),
    ("a.csv", "sent1,sent2,ending0,ending1,label\nx,y,a,b,0\nx,y,a,0\n",
     r"a\.csv:3: 4 cells, the header has 5"),
    ("a.csv", "sent1,sent2,ending0,ending1,label\nx,y,a,b,-1\n",
     r"a\.csv:2: label -1 is outside 0\.\.1"),
    ("a.csv", "", r"a\.csv:1: empty file"),
])
def test_bad_lines_name_file_and_line(tmp_path, name, text, message):
  path = tmp_path / name
  path.write_text(text)
  with pytest.raises(mc_data.MultipleChoiceFormatError, match=message):
    mc_data.read_examples(str(path))


def test_missing_and_empty_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.csv: multiple-choice file not found"):
    mc_data.read_examples(str(tmp_path / "nope.csv"))
  (tmp_path / "empty.jsonl").write_text("\n")
  with pytest.raises(mc_data.MultipleChoiceFormatError, match=r"empty\.jsonl: no example"):
    mc_data.read_examples(str(tmp_path / "empty.jsonl"))


def test_each_choice_is_a_truncated_pair(tokenizer):
  example = mc_data.Example("1", "the quick brown fox jumps over the lazy dog",
                            "and then", ("it sleeps", "it runs away very fast indeed"), 1)
  seq = 12
  features = mc_data.example_features(example, tokenizer, seq)
  assert features[mc_data.LABEL_IDS] == [1] and features[mc_data.IS_REAL_EXAMPLE] == [1]
  context = tokenizer.tokenize(example.context)
  for i, ending in enumerate(example.endings):
    ids = features["input_ids"][i * seq:(i + 1) * seq]
    second = tokenizer.tokenize(example.choice_text(ending))
    len_a, len_b = pairs.truncated_pair_lengths(len(context), len(second), seq - 3)
    tokens = ["[CLS]"] + context[:len_a] + ["[SEP]"] + second[:len_b] + ["[SEP]"]
    assert ids == tokenizer.convert_tokens_to_ids(tokens) + [0] * (seq - len(tokens))
    assert features["input_mask"][i * seq:(i + 1) * seq] == [1] * len(tokens) + [0] * (
        seq - len(tokens))
    assert features["segment_ids"][i * seq:(i + 1) * seq] == (
        [0] * (len_a + 2) + [1] * (len_b + 1) + [0] * (seq - len(tokens)))


def test_records_read_back_with_their_spec(tmp_path, tokenizer):
  examples = mc_data.read_examples(os.path.join(MC, "val.csv"))[:5]
  path = str(tmp_path / "val.tf_record")
  assert mc_data.write_records(examples, tokenizer, 24, path) == 5
  spec = input_pipeline.parsing_spec(mc_data.record_spec(24, 4))
  records = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(path)]
  assert len(records) == 5
  for record, example in zip(records, examples):
    assert record["input_ids"].shape == (4, 24)
    assert int(record["label_ids"]) == example.label
    expected = mc_data.example_features(example, tokenizer, 24)["input_ids"]
    np.testing.assert_array_equal(record["input_ids"].numpy().reshape(-1), expected)
