"""Loads exported SavedModels the way a server does: only tensorflow and tensorflow_text imported.

Run by tests/test_serving.py in a fresh process (never imports bert_tf):
  python tests/serving_subprocess_check.py REQUESTS_JSON OUTPUT_DIR

REQUESTS_JSON: {"ops": [saved model dirs], "requests": [{"model": dir, "signature": name,
"inputs": {name: [values]}}]}; a string value may be {"b64": ...} for raw bytes, as in TF
Serving's REST API. Writes OUTPUT_DIR/outputs.npz (key "<request index>/<output name>") and
OUTPUT_DIR/report.json: for every model dir in "ops", the ops of its graph and of every function
in its library, split into core TensorFlow ops (registered by `import tensorflow` alone),
tensorflow-text ops (registered only once tensorflow_text is imported) and unknown ones; plus
the modules of bert_tf found loaded (must be none).
"""

import base64
import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry


def graph_ops(saved_model_dir):
  """Every op type in the SavedModel's graphs, including all library functions."""
  proto = saved_model_pb2.SavedModel()
  with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
  ops = set()
  for meta_graph in proto.meta_graphs:
    ops.update(node.op for node in meta_graph.graph_def.node)
    for function in meta_graph.graph_def.library.function:
      ops.update(node.op for node in function.node_def)
  return ops


def to_value(value):
  if isinstance(value, dict):
    return base64.b64decode(value["b64"])
  if isinstance(value, list):
    return [to_value(v) for v in value]
  return value


def main(requests_file, output_dir):
  with open(requests_file) as f:
    spec = json.load(f)
  # Which ops exist before tensorflow_text registers its own.
  op_sets = {d: graph_ops(d) for d in spec["ops"]}
  core = {d: {op for op in ops if op_def_registry.get(op) is not None}
          for d, ops in op_sets.items()}
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  report = dict(models={}, bert_tf_modules=sorted(m for m in sys.modules
                                                  if m.split(".")[0] == "bert_tf"))
  for d, ops in op_sets.items():
    text_ops = {op for op in ops - core[d] if op_def_registry.get(op) is not None}
    report["models"][d] = dict(ops=sorted(ops), core=sorted(core[d]), tf_text=sorted(text_ops),
                               unknown=sorted(ops - core[d] - text_ops))
  outputs = {}
  loaded = {}
  for i, request in enumerate(spec["requests"]):
    if request["model"] not in loaded:
      loaded[request["model"]] = tf.saved_model.load(request["model"])
    signature = loaded[request["model"]].signatures[request["signature"]]
    inputs = {}
    for name, value in request["inputs"].items():
      spec_dtype = signature.structured_input_signature[1][name].dtype
      inputs[name] = tf.constant(np.array(to_value(value),
                                          dtype=object if spec_dtype == tf.string else None),
                                 dtype=spec_dtype)
    for name, value in signature(**inputs).items():
      outputs[f"{i}/{name}"] = value.numpy()
  np.savez(os.path.join(output_dir, "outputs.npz"), **outputs)
  with open(os.path.join(output_dir, "report.json"), "w") as f:
    json.dump(report, f, indent=1)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2])
