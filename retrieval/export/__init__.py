"""Export a checkpoint for inference runtimes, and embed with an export without torch.

`retrieval.export.onnx_export` (torch) writes an export directory: `model.onnx`, `preprocess.json`,
`manifest.json`. `retrieval.export.onnx_encoder.OnnxEncoder` embeds images with it using only
onnxruntime, numpy and Pillow. This package's own import loads nothing: import the module you need.
"""
