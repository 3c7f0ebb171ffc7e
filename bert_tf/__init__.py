"""bert_tf: Google's original BERT on TensorFlow 2 / Keras 3.

Importing the package imports nothing and changes nothing: data-preparation workers load no
TensorFlow, and a program that imports bert_tf keeps its own environment. The commands choose
TensorFlow's CPU kernels when they start (`bert_tf.cli.choose_cpu_kernels`, see docs/model.md).
"""

__version__ = "0.1.0"
