"""bert_tf.tasks.classifier.processors against the facts of the original run_classifier.py.

Fixtures are small files written in tmp_path in the original / GLUE layouts: the same files,
columns, header rows, label lists and guids as the original's processors, and errors naming the
file and line where the original crashed or silently changed the task.
"""

import csv
import logging
import os

import pytest
import tensorflow as tf

from bert_tf.tasks.classifier import processors as cp


def write(path, rows, newline="\n"):
  """Writes rows (lists of cells, or raw strings) as a tab-separated file; returns the path."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    for row in rows:
      f.write((row if isinstance(row, str) else "\t".join(row)) + newline)
  return str(path)


def as_tuples(examples):
  return [(e.guid, e.text_a, e.text_b, e.label) for e in examples]


# === Reading the original's tasks ===


def test_cola_headers_columns_and_guids(tmp_path):
  rows = [["gj04", "1", "", "The sailors rode the breeze clear of the rocks."],
          ["gj04", "0", "*", "The weights made the rope stretch over the pulley ."]]
  write(tmp_path / "train.tsv", rows)
  write(tmp_path / "dev.tsv", rows[::-1])
  write(tmp_path / "test.tsv", [["index", "sentence"], ["0", "Bill whistled past the house."],
                                ["1", "The car honked its way down the road."]])
  p = cp.ColaProcessor()
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-0", rows[0][3], None, "1"), ("train-1", rows[1][3], None, "0")]
  assert [e.guid for e in p.get_dev_examples(str(tmp_path))] == ["dev-0", "dev-1"]
  assert as_tuples(p.get_test_examples(str(tmp_path))) == [
      ("test-1", "Bill whistled past the house.", None, "0"),
      ("test-2", "The car honked its way down the road.", None, "0")]
  assert p.get_labels() == ["0", "1"]


def test_mrpc(tmp_path):
  header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
  write(tmp_path / "train.tsv", [header, ["1", "702876", "702977", "He left early.",
                                          "Early, he left."],
                                 ["0", "2108705", "2108831", "It rained.", "The sun shone."]])
  write(tmp_path / "test.tsv", [["index"] + header[1:], ["0", "1089874", "1089925", "A b", "C d"]])
  p = cp.MrpcProcessor()
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-1", "He left early.", "Early, he left.", "1"),
      ("train-2", "It rained.", "The sun shone.", "0")]
  assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-1", "A b", "C d", "0")]


MNLI_TRAIN_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                     "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
                     "sentence2", "label1", "gold_label"]


def mnli_row(index, premise, hypothesis, labels):
  return [str(index), "31193", f"{index}n", "government", "( ( x ) )", "( y )", "(ROOT x)",
          "(ROOT y)", premise, hypothesis] + labels


def test_mnli_quotes_are_literal_and_label_is_last_column(tmp_path):
  premise, hypothesis = 'He said "no', 'it "was" fine"'
  write(tmp_path / "train.tsv", [MNLI_TRAIN_HEADER,
                                 mnli_row(7, premise, hypothesis, ["neutral", "neutral"]),
                                 mnli_row(9, "a", "b", ["entailment", "contradiction"])])
  dev_header = MNLI_TRAIN_HEADER[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
  five = ["neutral"] * 4
  write(tmp_path / "dev_matched.tsv", [dev_header, mnli_row(3, "c", "d", five + ["entailment"])])
  write(tmp_path / "dev_mismatched.tsv", [dev_header, mnli_row(4, "e", "f", five + ["neutral"])])
  write(tmp_path / "test_matched.tsv", [MNLI_TRAIN_HEADER[:10], mnli_row(0, "g", "h", [])])
  write(tmp_path / "test_mismatched.tsv", [MNLI_TRAIN_HEADER[:10], mnli_row(1, "i", "j", [])])
  p = cp.PROCESSORS["mnli"]()
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-7", premise, hypothesis, "neutral"), ("train-9", "a", "b", "contradiction")]
  assert as_tuples(p.get_dev_examples(str(tmp_path))) == [("dev_matched-3", "c", "d",
                                                           "entailment")]
  assert as_tuples(p.get_examples(str(tmp_path), "dev_mismatched")) == [
      ("dev_mismatched-4", "e", "f", "neutral")]
  assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-0", "g", "h", "contradiction")]
  assert as_tuples(p.get_test_mismatched_examples(str(tmp_path))) == [
      ("test_mismatched-1", "i", "j", "contradiction")]
  assert p.get_labels() == ["contradiction", "entailment", "neutral"]
  # A run scores the mismatched sets too when their files are there; the original read only
  # the matched ones, which is all a run needs.
  from bert_tf.tasks.classifier import run as classifier_run  # pylint: disable=g-import-not-at-top
  sets = classifier_run._evaluation_sets(p, str(tmp_path), "dev")  # pylint: disable=protected-access
  assert [(suffix, len(examples)) for suffix, examples in sets] == [
      ("", 1), (classifier_run.MISMATCHED, 1)]
  os.remove(tmp_path / "dev_mismatched.tsv")
  sets = classifier_run._evaluation_sets(p, str(tmp_path), "dev")  # pylint: disable=protected-access
  assert [(suffix, len(examples)) for suffix, examples in sets] == [("", 1)]


def test_tsv_reading_keeps_quotes_and_handles_crlf(tmp_path):
  path = write(tmp_path / "x.tsv", ['"a\tb"\t"c', '""\t\'d\'\te"'], newline="\r\n")
  assert cp.read_tsv(path) == [['"a', 'b"', '"c'], ['""', "'d'", 'e"']]


XNLI_DEV_HEADER = ["language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse",
                   "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "promptID",
                   "pairID", "genre", "label1", "label2", "label3", "label4", "label5",
                   "sentence1_tokenized", "sentence2_tokenized", "match"]


def xnli_row(language, label, premise, hypothesis):
  return [language, label, "", "", "", "", premise, hypothesis, "1", "2", "facetoface", label,
          label, label, label, label, premise, hypothesis, "True"]


def test_xnli_language_files_filter_and_guids(tmp_path):
  write(tmp_path / "multinli" / "multinli.train.zh.tsv",
        [["premise", "hypo", "label"], ["他 说", "他 没 说", "contradictory"],
         ["你好", "你 好", "entailment"]])
  write(tmp_path / "multinli" / "multinli.train.de.tsv",
        [["premise", "hypo", "label"], ["Er sagte", "Er sagte nichts", "neutral"]])
  write(tmp_path / "xnli.dev.tsv", [XNLI_DEV_HEADER, xnli_row("de", "neutral", "a", "b"),
                                    xnli_row("zh", "entailment", "我", "你"),
                                    xnli_row("en", "neutral", "c", "d"),
                                    xnli_row("zh", "contradiction", "他", "她")])
  p = cp.PROCESSORS["xnli"]()
  assert p.language == "zh"
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-1", "他 说", "他 没 说", "contradiction"), ("train-2", "你好", "你 好", "entailment")]
  # guids count every line, the header and other languages included.
  assert as_tuples(p.get_dev_examples(str(tmp_path))) == [
      ("dev-2", "我", "你", "entailment"), ("dev-4", "他", "她", "contradiction")]
  de = cp.get_processor("XNLI", language="de")
  assert as_tuples(de.get_train_examples(str(tmp_path))) == [
      ("train-1", "Er sagte", "Er sagte nichts", "neutral")]
  assert [e.guid for e in de.get_dev_examples(str(tmp_path))] == ["dev-1"]


# === GLUE's other tasks ===


def test_sst2(tmp_path):
  write(tmp_path / "train.tsv", [["sentence", "label"], ["hide new secretions ", "0"],
                                 ["a \"gorgeous\" film", "1"]])
  write(tmp_path / "test.tsv", [["index", "sentence"], ["0", "uneasy mishmash"]])
  for name in ("sst-2", "sst2", "SST-2"):
    p = cp.get_processor(name)
    assert as_tuples(p.get_train_examples(str(tmp_path))) == [
        ("train-1", "hide new secretions ", None, "0"),
        ("train-2", 'a "gorgeous" film', None, "1")]
    assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-1", "uneasy mishmash", None,
                                                              "0")]


def test_qqp_and_skipping_short_rows(tmp_path):
  header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
  write(tmp_path / "train.tsv", [header, ["133273", "213221", "213222", "How is X?", "Why X?", "0"],
                                 ["402555", "536040", "536041", "Is it?", "It is?", "1"],
                                 ["5", "6", "7", "broken row"]])
  write(tmp_path / "test.tsv", [["id", "question1", "question2"], ["0", "Q1?", "Q2?"]])
  p = cp.QqpProcessor()
  with pytest.raises(cp.DataFormatError, match=r"train\.tsv:4: 4 tab-separated column\(s\)"):
    p.get_train_examples(str(tmp_path))
  skipping = cp.QqpProcessor(skip_short_rows=True)
  assert as_tuples(skipping.get_train_examples(str(tmp_path))) == [
      ("train-133273", "How is X?", "Why X?", "0"), ("train-402555", "Is it?", "It is?", "1")]
  assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-0", "Q1?", "Q2?", "0")]


@pytest.mark.parametrize("task,labels", [("qnli", ["entailment", "not_entailment"]),
                                         ("rte", ["entailment", "not_entailment"]),
                                         ("wnli", ["0", "1"])])
def test_index_sentence_sentence_label_tasks(tmp_path, task, labels):
  write(tmp_path / "train.tsv", [["index", "s1", "s2", "label"], ["0", "a?", "b.", labels[1]],
                                 ["1", "c?", "d.", labels[0]]])
  write(tmp_path / "dev.tsv", [["index", "s1", "s2", "label"], ["5", "e", "f", labels[0]]])
  write(tmp_path / "test.tsv", [["index", "s1", "s2"], ["0", "g", "h"]])
  p = cp.get_processor(task)
  assert p.get_labels() == labels
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-0", "a?", "b.", labels[1]), ("train-1", "c?", "d.", labels[0])]
  assert as_tuples(p.get_dev_examples(str(tmp_path))) == [("dev-5", "e", "f", labels[0])]
  assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-0", "g", "h", labels[0])]


def test_stsb_is_regression_with_float_labels(tmp_path):
  header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
            "sentence1", "sentence2", "score"]
  write(tmp_path / "train.tsv", [header, ["0", "main-captions", "MSRvid", "2012test", "0001",
                                          "none", "none", "A plane is taking off.",
                                          "An air plane is taking off.", "5.000"],
                                 ["1", "main-captions", "MSRvid", "2012test", "0004", "none",
                                  "none", "A man plays a flute.", "A man plays a bamboo flute.",
                                  "3.800"]])
  write(tmp_path / "test.tsv", [header[:-1], ["0"] + ["x"] * 6 + ["s1", "s2"]])
  for name in ("sts-b", "stsb"):
    p = cp.get_processor(name)
    assert p.is_regression and p.get_labels() is None
    assert as_tuples(p.get_train_examples(str(tmp_path))) == [
        ("train-0", "A plane is taking off.", "An air plane is taking off.", 5.0),
        ("train-1", "A man plays a flute.", "A man plays a bamboo flute.", 3.8)]
    assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-0", "s1", "s2", 0.0)]
  write(tmp_path / "dev.tsv", [header, ["0"] + ["x"] * 8 + ["high"]])
  with pytest.raises(cp.DataFormatError, match=r"dev\.tsv:2: label 'high' is not a number"):
    cp.StsbProcessor().get_dev_examples(str(tmp_path))


def test_processor_names():
  assert set(cp.PROCESSORS) == {"cola", "mnli", "mrpc", "xnli", "sst-2", "sst2", "qqp", "qnli",
                                "rte", "wnli", "sts-b", "stsb"}
  with pytest.raises(ValueError, match="Task not found: 'squad'"):
    cp.get_processor("squad")
  with pytest.raises(ValueError, match="no split 'dev_mismatched'"):
    cp.MrpcProcessor().get_examples("/nonexistent", "dev_mismatched")


# === Errors ===


def test_errors_name_file_line_and_labels(tmp_path, caplog):
  header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
  write(tmp_path / "train.tsv", [header, ["1", "1", "2", "a", "b"], ["1", "1", "2", "only a"]])
  p = cp.MrpcProcessor()
  with pytest.raises(cp.DataFormatError) as e:
    p.get_train_examples(str(tmp_path))
  assert f"{tmp_path / 'train.tsv'}:3:" in str(e.value) and "needs at least 5" in str(e.value)
  write(tmp_path / "dev.tsv", [header, ["1", "1", "2", "a", "b"], ["yes", "1", "2", "a", "b"]])
  with pytest.raises(cp.DataFormatError) as e:
    p.get_dev_examples(str(tmp_path))
  assert f"{tmp_path / 'dev.tsv'}:3: unknown label 'yes'" in str(e.value)
  assert "['0', '1']" in str(e.value)
  with pytest.raises(FileNotFoundError, match=r"test\.tsv: file not found"):
    p.get_test_examples(str(tmp_path))
  with open(tmp_path / "dev.tsv", "wb") as f:
    f.write(b"h\th\th\th\th\n1\t1\t2\ta\tb\n1\t1\t2\t\xff\tb\n")
  with pytest.raises(cp.DataFormatError, match=r"dev\.tsv:3: invalid UTF-8"):
    p.get_dev_examples(str(tmp_path))
  # A blank line is a row with no columns (the original crashed with IndexError).
  write(tmp_path / "dev.tsv", [header, ["1", "1", "2", "a", "b"], ""])
  with pytest.raises(cp.DataFormatError, match=r"dev\.tsv:3: 0 tab-separated column"):
    p.get_dev_examples(str(tmp_path))
  # A carriage return inside a line is deleted, as the original's reader (tf.gfile's readline)
  # deletes it: "a\rx" is the word "ax" there; warned about, naming the file and line.
  write(tmp_path / "dev.tsv", [header, "1\t1\t2\ta\rx\tb"])
  with caplog.at_level(logging.WARNING):
    examples = p.get_dev_examples(str(tmp_path))
  assert (examples[0].text_a, examples[0].text_b) == ("ax", "b")
  assert "dev.tsv: 1 line(s) hold a carriage return" in caplog.text
  assert "first line 2" in caplog.text
  with tf.io.gfile.GFile(str(tmp_path / "dev.tsv"), "r") as f:  # the original's reading
    assert list(csv.reader(f, delimiter="\t", quotechar=None))[1][3] == "ax"


def test_utf8_bom_is_dropped(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_bytes(b"\xef\xbb\xbfgj04\t1\t\tFirst sentence.\n")
  assert cp.read_tsv(str(path)) == [["gj04", "1", "", "First sentence."]]


# === The generic processor ===


def test_generic_tsv_by_name_with_inferred_labels(tmp_path):
  write(tmp_path / "train.tsv", [["id", "label", "premise", "hypothesis"],
                                 ["a1", "pos", '"quoted', "x"], ["a2", "neg", "b", "y"],
                                 ["a3", "mid", "c", "z"]])
  write(tmp_path / "dev.tsv", [["label", "hypothesis", "premise", "id"], ["neg", "q", "p", "d1"],
                               ["odd", "q", "p", "d2"]])
  write(tmp_path / "test.tsv", [["id", "premise", "hypothesis"], ["t1", "u", "v"]])
  p = cp.GenericProcessor("premise", "hypothesis", "label")
  assert p.has_header
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-1", '"quoted', "x", "pos"), ("train-2", "b", "y", "neg"),
      ("train-3", "c", "z", "mid")]
  assert p.get_labels() == ["mid", "neg", "pos"]
  assert cp.GenericProcessor("premise", "hypothesis", "label").get_labels(str(tmp_path)) == \
      ["mid", "neg", "pos"]
  with pytest.raises(cp.DataFormatError, match=r"dev\.tsv:3: unknown label 'odd'.*\['mid', "):
    p.get_dev_examples(str(tmp_path))
  # The test file has no label column: every label is the first one.
  assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-1", "u", "v", "mid")]
  with_guids = cp.GenericProcessor("premise", None, "label", guid_column="id",
                                   label_list=["pos", "neg", "mid"])
  assert [e.guid for e in with_guids.get_train_examples(str(tmp_path))] == \
      ["train-a1", "train-a2", "train-a3"]
  assert with_guids.get_labels() == ["pos", "neg", "mid"]
  bad = cp.GenericProcessor("premise", "missing", "label")
  with pytest.raises(cp.DataFormatError, match=r"train\.tsv:1: no column 'missing'"):
    bad.get_train_examples(str(tmp_path))


def test_generic_csv_by_index_without_header(tmp_path):
  (tmp_path / "train.csv").write_text('1,"Hello, world",x\n0,"two\nlines",y\n1,plain,z\n',
                                      encoding="utf-8")
  (tmp_path / "dev.csv").write_text('1,a\n', encoding="utf-8")
  p = cp.GenericProcessor(1, None, 0, train_file="train.csv", dev_file="dev.csv")
  assert not p.has_header
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-0", "Hello, world", None, "1"), ("train-1", "two\nlines", None, "0"),
      ("train-2", "plain", None, "1")]
  assert p.get_labels() == ["0", "1"]
  pair = cp.GenericProcessor(1, 2, 0, train_file="train.csv", dev_file="dev.csv")
  pair.get_train_examples(str(tmp_path))
  with pytest.raises(cp.DataFormatError, match=r"dev\.csv:1: 2 column\(s\), but the text_b"):
    pair.get_dev_examples(str(tmp_path))


def test_generic_jsonl(tmp_path):
  (tmp_path / "train.jsonl").write_text(
      '{"q": "Is it?", "a": "Yes.", "y": 1}\n\n{"q": "Why?", "a": null, "y": 0}\n',
      encoding="utf-8")
  (tmp_path / "test.jsonl").write_text('{"q": "When?", "a": "Now."}\n', encoding="utf-8")
  p = cp.GenericProcessor("q", "a", "y", train_file="train.jsonl", test_file="test.jsonl")
  assert as_tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-0", "Is it?", "Yes.", "1"), ("train-1", "Why?", None, "0")]
  assert as_tuples(p.get_test_examples(str(tmp_path))) == [("test-0", "When?", "Now.", "0")]
  (tmp_path / "dev.jsonl").write_text('{"q": "x", "a": "y", "y": 1}\n{"q": 5, "y": 1}\n',
                                      encoding="utf-8")
  with pytest.raises(cp.DataFormatError, match=r"dev\.jsonl:2: no key 'a'"):
    cp.GenericProcessor("q", "a", "y", train_file="train.jsonl",
                        dev_file="dev.jsonl").get_dev_examples(str(tmp_path))
  (tmp_path / "arrays.jsonl").write_text('["first", 2.5]\n{"x": 1\n', encoding="utf-8")
  regression = cp.GenericProcessor(0, None, 1, is_regression=True, train_file="arrays.jsonl")
  with pytest.raises(cp.DataFormatError, match=r"arrays\.jsonl:2: not valid JSON"):
    regression.get_train_examples(str(tmp_path))
  (tmp_path / "arrays.jsonl").write_text('["first", 2.5]\n', encoding="utf-8")
  assert as_tuples(regression.get_train_examples(str(tmp_path))) == [("train-0", "first", None,
                                                                      2.5)]
  assert regression.get_labels() is None


# === Input that would silently change the task ===


def test_labels_with_whitespace_around_them_are_stripped_with_a_warning(tmp_path, caplog):
  # Trailing space, a no-break space, a leading tab inside a CSV cell, a zero-width space:
  # without stripping, each is a class of its own ("pos " a third class).
  write(tmp_path / "train.tsv", [["text", "label"], ["a", "pos"], ["b", "neg"], ["c", "pos "],
                                 ["d", "neg\u00a0"], ["e", "\u200bpos"]])
  p = cp.GenericProcessor("text", None, "label")
  examples = p.get_train_examples(str(tmp_path))
  assert p.get_labels() == ["neg", "pos"]
  assert [e.label for e in examples] == ["pos", "neg", "pos", "neg", "pos"]
  path = tmp_path / "train.tsv"
  assert f"{path}:4: label 'pos ' has whitespace around it; read as 'pos' (3 label(s)" \
      in caplog.text
  (tmp_path / "train.csv").write_text('text,label\n"x, y",\tpos\nz,neg\n', encoding="utf-8")
  csv_processor = cp.GenericProcessor("text", None, "label", train_file="train.csv")
  assert [e.label for e in csv_processor.get_train_examples(str(tmp_path))] == ["pos", "neg"]
  assert csv_processor.get_labels() == ["neg", "pos"]
  # A task with a fixed label list reads "1 " as "1" instead of refusing it as unknown.
  header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
  write(tmp_path / "mrpc" / "train.tsv", [header, ["1 ", "1", "2", "a", "b"],
                                          ["0", "3", "4", "c", "d"]])
  assert [e.label for e in cp.MrpcProcessor().get_train_examples(str(tmp_path / "mrpc"))] == \
      ["1", "0"]
  assert f"{tmp_path / 'mrpc' / 'train.tsv'}:2: label '1 ' has whitespace" in caplog.text
  # An empty label is refused (it would be a class "").
  write(tmp_path / "empty" / "train.tsv", [["text", "label"], ["a", "pos"], ["b", " "]])
  with pytest.raises(cp.DataFormatError, match=r"empty[/\\]train\.tsv:3: empty label"):
    cp.GenericProcessor("text", None, "label").get_train_examples(str(tmp_path / "empty"))


@pytest.mark.parametrize("make", ["generic_tsv", "generic_csv", "generic_index", "mrpc", "xnli"])
def test_a_repeated_header_row_is_refused_with_its_line(tmp_path, make):
  if make == "mrpc":
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    path = write(tmp_path / "train.tsv", [header, ["1", "1", "2", "a", "b"], header,
                                          ["0", "3", "4", "c", "d"]])
    read = lambda: cp.MrpcProcessor().get_train_examples(str(tmp_path))
    line = 3
  elif make == "xnli":
    # The repeated header's language column is "language": it would be skipped silently.
    header = ["language", "gold_label"] + [f"c{i}" for i in range(2, 8)]
    row = ["de", "neutral", "", "", "", "", "p", "h"]
    path = write(tmp_path / "xnli.dev.tsv", [header, row, row, header + [], row])
    read = lambda: cp.XnliProcessor("de").get_dev_examples(str(tmp_path))
    line = 4
  elif make == "generic_csv":
    path = str(tmp_path / "train.csv")
    # Joined files: the second header has quotes, the third a byte-order mark.
    (tmp_path / "train.csv").write_text('text,label\n"a, b",pos\nc,neg\n"text","label"\n'
                                        'd,pos\n\ufefftext,label\n', encoding="utf-8")
    read = lambda: cp.GenericProcessor("text", None, "label", train_file="train.csv"
                                       ).get_train_examples(str(tmp_path))
    line = 4
  else:
    header = ["text", "label"]
    path = write(tmp_path / "train.tsv", [header, ["a", "pos"], ["b", "neg"],
                                          ["text ", "label"], ["c", "pos"]])
    processor = cp.GenericProcessor("text", None, "label") if make == "generic_tsv" else \
        cp.GenericProcessor(0, None, 1, has_header=True, label_list=["pos", "neg", "label"])
    read = lambda: processor.get_train_examples(str(tmp_path))
    line = 4
  with pytest.raises(cp.DataFormatError) as e:
    read()
  assert str(e.value).startswith(f"{path}:{line}: the header row (line 1) is repeated")


@pytest.mark.parametrize("content, file_name", [("text\tlabel\n", "train.tsv"),
                                                ("text,label\r\n", "train.csv"),
                                                ("\n\n", "train.jsonl")])
def test_a_training_file_without_examples_is_one_error(tmp_path, content, file_name):
  (tmp_path / file_name).write_text(content, encoding="utf-8")
  write(tmp_path / "dev.tsv", [["text", "label"], ["a", "pos"]])
  columns = ("text", None, "label")
  p = cp.GenericProcessor(*columns, train_file=file_name)
  for read in (lambda: p.get_train_examples(str(tmp_path)),
               lambda: cp.GenericProcessor(*columns, train_file=file_name).get_dev_examples(
                   str(tmp_path)),
               lambda: cp.GenericProcessor(*columns, train_file=file_name).get_labels(
                   str(tmp_path))):
    with pytest.raises(cp.DataFormatError, match=r"train\.\w+: no training example to learn "
                       r"the labels from"):
      read()
  # With a label list the file reads as no examples (the commands refuse an empty split).
  assert cp.GenericProcessor(*columns, train_file=file_name,
                             label_list=["pos"]).get_train_examples(str(tmp_path)) == []


def test_fields_longer_than_the_csv_default_limit_are_read(tmp_path):
  long_text = "word " * 60000  # 300000 characters, over csv's default 131072
  write(tmp_path / "train.tsv", [["text", "label"], [long_text, "pos"], ["short", "neg"]])
  (tmp_path / "train.csv").write_text(f'text,label\n"{long_text}, quoted",pos\nb,neg\n',
                                      encoding="utf-8")
  import csv  # pylint: disable=g-import-not-at-top
  previous = csv.field_size_limit(131072)  # the default, whatever earlier tests set
  try:
    tsv = cp.GenericProcessor("text", None, "label").get_train_examples(str(tmp_path))
    assert [len(e.text_a) for e in tsv] == [len(long_text), 5]
    csv.field_size_limit(131072)
    csv_examples = cp.GenericProcessor("text", None, "label", train_file="train.csv"
                                       ).get_train_examples(str(tmp_path))
    assert csv_examples[0].text_a == long_text + ", quoted"
    assert cp.read_tsv(str(tmp_path / "train.tsv"))[1][0] == long_text
  finally:
    csv.field_size_limit(max(previous, csv.field_size_limit()))


def test_empty_files_are_named(tmp_path):
  """An empty JSONL training file says it has no row (JSONL has no header); an empty dev set
  names its file, not only the folder."""
  import types  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import run as classifier_run  # pylint: disable=g-import-not-at-top
  (tmp_path / "train.jsonl").write_text("")
  p = cp.GenericProcessor("text", None, "label", train_file="train.jsonl")
  with pytest.raises(cp.DataFormatError, match=r"train\.jsonl: no training example .*has no row"):
    p.get_labels(str(tmp_path))
  (tmp_path / "train.csv").write_text("text,label\nhello,a\n")
  (tmp_path / "dev.csv").write_text("text,label\n")
  p = cp.GenericProcessor("text", None, "label", train_file="train.csv", dev_file="dev.csv")
  settings = types.SimpleNamespace(do_train=True, do_eval=True, do_predict=False,
                                   data_dir=str(tmp_path), task_name="generic")
  with pytest.raises(classifier_run.TrainingError,
                     match=r"dev\.csv: the generic dev set has no example"):
    classifier_run._read_data(p, settings)  # pylint: disable=protected-access
  assert cp.PROCESSORS["mnli"]().source("d", "dev_mismatched") == os.path.join(
      "d", "dev_mismatched.tsv")
