"""The worker side of benchmarks/serving.py (imported by path): each system it times runs in a
process of its own, started as `serving.py --worker=<spec.json>`, so that its thread settings
(TensorFlow's, ONNX Runtime's, PyTorch's, the tokenizer's) and its CPU affinity are its own and
PyTorch never shares a process with TensorFlow.

A worker loads its system, answers the check texts (written to an .npz for the equality check),
then serves commands read from stdin, one a line, answering each with one line that starts
with PROTOCOL (libraries may print their own lines to stdout):
  warm    one pass over every batch shape the rounds use (not recorded)
  round   one timing round; the answer holds every call's seconds
  quit    exit

The systems (spec["system"]):
  ours          a raw-text export of `python -m bert_tf.export` (the text model `bert/<v>`),
                its `serving_default` signature called through tf.saved_model.load
  ours_classifier, ours_tagger, ours_squad
                the fine-tuned exports of the library's export functions, `serving_default`
  ours_python_tokenizer
                bert_tf.tokenization in Python, then the encoder export (bert_encoder/<v>)
  onnxruntime   an ONNX file (serving.py makes it with prepare_onnx below) in an
                InferenceSession, Hugging Face's fast tokenizer, dynamic padding per batch
  hf_torch      transformers' BertTokenizerFast + BertModel, PyTorch eager, dynamic padding,
                torch.inference_mode

Prepare tasks (spec["prepare"]) run here as well, for the same reason (TensorFlow and PyTorch
in separate processes): "onnx" (torch.onnx.export, then ONNX Runtime's BERT optimizer), "tasks"
(the fine-tuned exports with heads of random initialisation) and "tiny" (the random-weight
model of --smoke, written as a Hugging Face folder).
"""

import json
import os
import sys
import time

PROTOCOL = "@@serving "
# The random classifier head's weights, beside the task exports: serving.check_outputs computes
# the classifier export's expected logits from the text model's pooled output with them.
CLASSIFIER_HEAD_FILE = "classifier_head.npz"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def say(message):
  """One protocol line to the driver."""
  sys.stdout.write(PROTOCOL + json.dumps(message) + "\n")
  sys.stdout.flush()


def settle_threads(threads, core):
  """Before any library starts its threads: with one thread, pin this process to `core` and keep
  Hugging Face's tokenizer on one thread (its batch encoding is parallel by default)."""
  if threads == 1:
    os.sched_setaffinity(0, {core})
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
  os.environ.setdefault("OMP_NUM_THREADS", str(threads))


# === Systems: spec -> (run(texts), check(texts) -> {name: array}) ===


def _tensorflow(threads):
  """TensorFlow with the commands' CPU kernels, `threads` intra- and inter-op threads, and
  tensorflow-text's ops registered (the exports' tokenizer)."""
  sys.path.insert(0, REPO_ROOT)
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  cli.choose_cpu_kernels()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  return tf


def ours(spec):
  """An export's serving_default, called as TF Serving calls it: every output fetched."""
  tf = _tensorflow(spec["threads"])
  import numpy as np  # pylint: disable=g-import-not-at-top
  fn = tf.saved_model.load(spec["path"]).signatures["serving_default"]
  kind = spec["system"]

  def call(texts):
    if kind == "ours_squad":  # question: a short sentence; context: the text timed
      questions = [spec["questions"][i % len(spec["questions"])] for i in range(len(texts))]
      outputs = fn(question=tf.constant(questions), context=tf.constant(texts))
    else:
      outputs = fn(text=tf.constant(texts))
    return {key: value.numpy() for key, value in outputs.items()}

  def check(texts):
    out = call(texts)
    if kind == "ours":
      lengths = out["input_mask"].sum(axis=1)
      return dict(lengths=lengths, pooled=out["pooled_output"],
                  **{f"sequence_{i}": out["sequence_output"][i, :n] for i, n in enumerate(lengths)})
    if kind == "ours_classifier":
      return dict(probabilities=out["probabilities"])
    numeric = [v for v in out.values() if v.dtype.kind == "f"]
    return dict(finite=np.array([all(np.isfinite(v).all() for v in numeric)]))
  return call, check


def ours_python_tokenizer(spec):
  """What a client without the raw-text graph does: bert_tf.tokenization.FullTokenizer and the
  original's [CLS] A [SEP] packing in Python, padded to the batch's longest text, then the
  encoder export's (bert_encoder/<version>) serving_default, every output fetched."""
  tf = _tensorflow(spec["threads"])
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(os.path.join(spec["checkpoint"], "vocab.txt"),
                                         do_lower_case=True)
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  fn = tf.saved_model.load(spec["path"]).signatures["serving_default"]

  def encode(texts):
    rows = [[cls_id] + tokenizer.tokenize_to_ids(t)[:spec["max_length"] - 2] + [sep_id]
            for t in texts]
    ids = np.zeros([len(rows), max(len(r) for r in rows)], np.int32)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
      ids[i, :len(row)], mask[i, :len(row)] = row, 1
    return dict(input_word_ids=ids, input_mask=mask, input_type_ids=np.zeros_like(ids))

  def infer(enc):
    out = {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in enc.items()}).items()}
    return out["sequence_output"], out["pooled_output"]

  def call(texts):
    return infer(encode(texts))
  return call, _peer_check(encode, infer, mask="input_mask")


def _hf_tokenizer(spec):
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.BertTokenizerFast.from_pretrained(spec["checkpoint"], local_files_only=True)


def _peer_check(encode, infer, mask="attention_mask"):
  """check() of a peer: lengths, pooled output and each text's real positions."""
  def check(texts):
    enc = encode(texts)
    sequence, pooled = infer(enc)
    lengths = enc[mask].sum(axis=1)
    return dict(lengths=lengths, pooled=pooled,
                **{f"sequence_{i}": sequence[i, :n] for i, n in enumerate(lengths)})
  return check


def onnxruntime_system(spec):
  """ONNX Runtime as its users deploy BERT: the optimized ONNX file, HF's fast tokenizer."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  tokenizer = _hf_tokenizer(spec)
  options = ort.SessionOptions()
  options.intra_op_num_threads = spec["threads"]
  options.inter_op_num_threads = 1
  session = ort.InferenceSession(spec["path"], options, providers=["CPUExecutionProvider"])
  names = [i.name for i in session.get_inputs()]

  def encode(texts):
    return tokenizer(texts, padding=True, truncation=True, max_length=spec["max_length"],
                     return_tensors="np")

  def infer(enc):
    return session.run(None, {name: enc[name].astype(np.int64) for name in names})

  def call(texts):
    return infer(encode(texts))
  return call, _peer_check(encode, lambda enc: tuple(infer(enc)))


def hf_torch(spec):
  """Hugging Face as its users run it on CPU: fast tokenizer, BertModel in eager mode."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(spec["threads"])
  tokenizer = _hf_tokenizer(spec)
  model = transformers.BertModel.from_pretrained(spec["checkpoint"], local_files_only=True).eval()

  def encode(texts):
    return tokenizer(texts, padding=True, truncation=True, max_length=spec["max_length"],
                     return_tensors="pt")

  def infer(enc):
    with torch.inference_mode():
      out = model(**enc)
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()

  def call(texts):
    return infer(encode(texts))

  def encode_numpy(texts):
    return {key: value.numpy() for key, value in encode(texts).items()}
  check = _peer_check(encode_numpy, lambda enc: infer({k: torch.from_numpy(v)
                                                       for k, v in enc.items()}))
  return call, check


SYSTEMS = dict(ours=ours, ours_classifier=ours, ours_tagger=ours, ours_squad=ours,
               ours_python_tokenizer=ours_python_tokenizer,
               onnxruntime=onnxruntime_system, hf_torch=hf_torch)


# === Timing ===


def timed(call, batches):
  """Seconds of each call, one per batch, in order."""
  times = []
  for batch in batches:
    start = time.perf_counter()
    call(batch)
    times.append(time.perf_counter() - start)
  return times


def batches_of(texts, size, count):
  """`count` batches of `size` consecutive texts (wrapping around)."""
  return [[texts[(i * size + j) % len(texts)] for j in range(size)] for i in range(count)]


def median_text(texts, count):
  """Of the first `count` texts (wrapping around, as batches_of takes them), the one of median
  length in characters (the first of equal lengths)."""
  chosen = [texts[i % len(texts)] for i in range(count)]
  return sorted(chosen, key=len)[(len(chosen) - 1) // 2]


def one_round(call, spec, warm=False):
  """{"latency": {set: seconds per batch-1 request}, "latency_same": {set: seconds per batch-1
  request of one text (median_text), as many}, "throughput": {set: {batch: seconds per
  batch}}, "sweep": {batch: seconds per batch of short text}}. With warm, a few calls of each
  kind (allocation, kernel choice) and nothing kept."""
  texts, plan = spec["texts"], spec["plan"]
  few = lambda count: min(count, 2) if warm else count
  result = {"latency": {}, "latency_same": {}, "throughput": {}, "sweep": {}}
  for name in plan["sets"]:
    count = min(plan["requests"], 10) if warm else plan["requests"]
    result["latency"][name] = timed(call, batches_of(texts[name], 1, count))
    # The same requests' count of one text, the set's median length of them, asked again and
    # again: the tail a server adds by itself, without the texts' own spread of lengths.
    result["latency_same"][name] = timed(call, [[median_text(texts[name], count)]] * count)
    result["throughput"][name] = {
        str(size): timed(call, batches_of(texts[name], size,
                                          few(max(1, plan["examples"] // size))))
        for size in plan["throughput_batches"]}
  for size in plan["sweep_batches"]:
    result["sweep"][str(size)] = timed(call, batches_of(
        texts[plan["sweep_set"]], size, few(max(2, plan["sweep_examples"] // size))))
  return result


def serve(spec):
  """The worker's life: load, check, then answer commands until quit or end of input."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  settle_threads(spec["threads"], spec["core"])
  start = time.perf_counter()
  call, check = SYSTEMS[spec["system"]](spec)
  np.savez(spec["check_file"], **check(spec["check_texts"]))
  say({"ready": time.perf_counter() - start, "versions": versions()})
  for line in sys.stdin:
    command = line.strip()
    if command == "quit":
      break
    if command == "warm":
      one_round(call, spec, warm=True)
      say({"warm": True})
    elif command == "round":
      say({"round": one_round(call, spec)})


def versions():
  """The versions of whatever this process imported, of the libraries the table names."""
  found = {}
  for module in ("tensorflow", "tensorflow_text", "onnxruntime", "onnx", "torch", "transformers",
                 "tokenizers", "numpy"):
    if module in sys.modules:
      found[module] = getattr(sys.modules[module], "__version__", "?")
  return found


# === Preparation ===


def prepare_onnx(spec):
  """The Hugging Face folder's BertModel exported to ONNX by torch.onnx.export (the TorchScript
  exporter, dynamic batch and sequence axes, opset 17; attention in its eager form, the pattern
  ONNX Runtime's fusions match), then onnxruntime.transformers' BERT optimizer at its default
  level. Says the fused operator counts."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from onnxruntime.transformers import optimizer  # pylint: disable=g-import-not-at-top
  model = transformers.BertModel.from_pretrained(spec["checkpoint"], local_files_only=True,
                                                 attn_implementation="eager").eval()

  class Outputs(torch.nn.Module):
    """BertModel's two outputs as a tuple, inputs by name (the exporter passes positionals)."""

    def __init__(self, bert):
      super().__init__()
      self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
      out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids)
      return out.last_hidden_state, out.pooler_output

  names = ["input_ids", "attention_mask", "token_type_ids"]
  example = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in names)
  raw = os.path.join(spec["out_dir"], "bert.onnx")
  torch.onnx.export(Outputs(model).eval(), example, raw, input_names=names,
                    output_names=["last_hidden_state", "pooler_output"],
                    dynamic_axes=dict({n: {0: "batch", 1: "sequence"} for n in names},
                                      last_hidden_state={0: "batch", 1: "sequence"},
                                      pooler_output={0: "batch"}),
                    opset_version=17, dynamo=False)
  config = model.config
  optimized = optimizer.optimize_model(raw, model_type="bert",
                                       num_heads=config.num_attention_heads,
                                       hidden_size=config.hidden_size)
  path = os.path.join(spec["out_dir"], "bert_optimized.onnx")
  optimized.save_model_to_file(path)
  fused = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
  # What a fully fused BERT holds: one embedding LayerNorm, and per layer one attention, one
  # bias-GELU and two skip-LayerNorms (ORT's own fusion check counts the same ops).
  layers = config.num_hidden_layers
  expected = dict(EmbedLayerNormalization=1, Attention=layers, BiasGelu=layers,
                  SkipLayerNormalization=2 * layers)
  missing = {k: f"{fused.get(k, 0)} of {v}" for k, v in expected.items() if fused.get(k, 0) != v}
  say({"path": path, "fused": fused, "missing": missing, "versions": versions()})


def _encoder_weights(checkpoint):
  """(config, original-name weights) of a Hugging Face folder, as `bert_tf.export` reads it."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  config = checkpoints.config_beside(checkpoints.resolve_checkpoint(checkpoint))
  return config, checkpoints.read_weights(checkpoint, config)


def _with_encoder(model, weights):
  """The model with the encoder's weights; its head keeps its random initialisation."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  report = checkpoints.set_original_weights(model, weights, strict=False)
  encoder_missing = [n for n in report.missing if n.startswith("bert/")]
  if encoder_missing or report.mismatched:
    raise RuntimeError(f"{model.name}: encoder weights not loaded: {report.summary()}")
  return model


def prepare_tasks(spec):
  """The classifier (2 labels), tagger (3 tags) and SQuAD (1.1 settings, windows of 384)
  exports of the library's export functions, from the checkpoint's encoder and heads of random
  initialisation (seed 0): the speed does not depend on the head's values. Says each export's
  path, and writes the classifier head's weights for the equality check."""
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  _tensorflow(spec["threads"])
  from bert_tf.tasks.classifier import head as clf_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import head as squad_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import head as tagging_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import serving_module as clf  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import serving_module as squad_module  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import serving_module as tagger_module  # pylint: disable=g-import-not-at-top
  config, weights = _encoder_weights(spec["checkpoint"])
  vocab = os.path.join(spec["checkpoint"], "vocab.txt")
  keras.utils.set_random_seed(0)
  paths = {}
  kinds = spec["kinds"]
  if "ours_classifier" in kinds:
    model = _with_encoder(clf_head.build_classifier_model(config, 2), weights)
    paths["ours_classifier"] = clf.export_classifier_model(
        model, config, vocab, spec["out_dir"], ["first", "second"], pair=False,
        seq_length=spec["max_length"], warmup=spec["warmup"])
    dense = model.get_layer(clf_head.HEAD_LAYER)
    np.savez(os.path.join(spec["out_dir"], CLASSIFIER_HEAD_FILE),
             kernel=dense.kernel.numpy(), bias=dense.bias.numpy())
  if "ours_tagger" in kinds:
    model = _with_encoder(tagging_head.build_tagger_model(config, 3), weights)
    paths["ours_tagger"] = tagger_module.export_tagger_model(
        model, config, vocab, spec["out_dir"], ["O", "B-X", "I-X"], do_lower_case=True,
        seq_length=spec["max_length"], warmup=spec["warmup"])
  if "ours_squad" in kinds:
    model = _with_encoder(squad_head.build_span_model(config), weights)
    answers = squad_module.AnswerSettings(
        do_lower_case=True, seq_length=384, doc_stride=128, max_query_length=64, n_best_size=20,
        max_answer_length=30, version_2_with_negative=False, null_score_diff_threshold=0.0)
    paths["ours_squad"] = squad_module.export_squad_model(
        model, config, vocab, spec["out_dir"], answers, warmup=spec["warmup"])
  say({"paths": paths})


def prepare_tiny(spec):
  """A random-weight BERT of spec["config"]'s sizes (seed 0) as a Hugging Face BertModel folder:
  config.json, model.safetensors, vocab.txt (spec["vocab_file"]) and tokenizer_config.json."""
  import shutil  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  _tensorflow(spec["threads"])
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model import conversion  # pylint: disable=g-import-not-at-top
  from bert_tf.model.heads import build_pretraining_model  # pylint: disable=g-import-not-at-top
  config = BertConfig(**spec["config"])
  keras.utils.set_random_seed(0)
  weights = checkpoints.get_original_weights(build_pretraining_model(config))
  encoder = {k: v for k, v in weights.items() if not k.startswith("cls/")}
  out = spec["out_dir"]
  os.makedirs(out, exist_ok=True)
  checkpoints.write_hf_safetensors(encoder, os.path.join(out, "model.safetensors"), prefix="")
  with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
    json.dump(conversion.hf_config_dict(config), f, indent=2)
  with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
  shutil.copyfile(spec["vocab_file"], os.path.join(out, "vocab.txt"))
  say({"path": out})


PREPARE = dict(onnx=prepare_onnx, tasks=prepare_tasks, tiny=prepare_tiny)


def main(spec_file):
  with open(spec_file, encoding="utf-8") as f:
    spec = json.load(f)
  if "prepare" in spec:
    settle_threads(spec["threads"], spec.get("core", 0))
    PREPARE[spec["prepare"]](spec)
  else:
    serve(spec)
