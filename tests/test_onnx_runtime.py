"""ONNXRuntimeBackend on the CPU EP: config and option checks, and the IO-binding paths ONNX Runtime takes
with CPU tensors (inputs bound by pointer, outputs bound to torch tensors or taken over through DLPack)."""

import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from aitune_ray.backend import ONNXExecutionProvider, ONNXRuntimeBackend, ONNXRuntimeBackendConfig
from aitune_ray.backend.onnx_runtime_io import BoundSession
from aitune_ray.backend.onnx_runtime_options import session_providers
from aitune_ray.errors import BuildError, ConfigError, InputMismatchError
from aitune_ray.model.samples import Sample, SampleStore
from tests.helpers import MLP

WIDTH = 16
CPU = torch.device("cpu")


def store(model, batch_sizes=(2, 5)) -> SampleStore:
    samples = []
    for bs in batch_sizes:
        x = torch.randn(bs, WIDTH)
        with torch.no_grad():
            samples.append(Sample((x,), {}, model(x), bs))
    return SampleStore(samples)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    model = MLP(WIDTH).eval()
    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False))
    backend.build(model, store(model), CPU, tmp_path_factory.mktemp("onnx"))
    return model, backend


# ----- config ----------------------------------------------------------------------------------


def test_config_round_trip_keeps_options_and_normalizes_provider_names():
    config = ONNXRuntimeBackendConfig(
        execution_provider="cuda", use_cuda_graphs=True, graph_optimization_level="enable_extended",
        transformer_optimizer="bert",
        provider_options={"cuda": {"use_tf32": False, "cudnn_conv_algo_search": "HEURISTIC"},
                          "TensorrtExecutionProvider": {"trt_fp16_enable": True}})
    data = config.to_dict()
    assert data["execution_provider"] == "CUDAExecutionProvider"
    assert data["provider_options"] == {"CUDAExecutionProvider": {"use_tf32": False, "cudnn_conv_algo_search": "HEURISTIC"},
                                        "TensorrtExecutionProvider": {"trt_fp16_enable": True}}
    again = ONNXRuntimeBackendConfig.from_dict(data)
    assert again == config and again.key() == config.key()
    assert ONNXRuntimeBackendConfig().key() != config.key()


@pytest.mark.parametrize("options, named", [
    ({"cuda": {"use_tf23": True}}, "unknown CUDAExecutionProvider option 'use_tf23'"),
    ({"tensorrt": {"trt_fp16": True}}, "unknown TensorrtExecutionProvider option 'trt_fp16'"),
    ({"cpu": {"intra_op_threads": 2}}, "unknown CPUExecutionProvider option 'intra_op_threads'"),
    ({"cuda": {"enable_cuda_graph": True}}, "'enable_cuda_graph' is set by ONNXRuntimeBackend"),
    ({"tensorrt": {"trt_engine_cache_path": "/elsewhere"}}, "'trt_engine_cache_path' is set by ONNXRuntimeBackend"),
    ({"cuda": {"device_id": 1}}, "'device_id' is set by ONNXRuntimeBackend"),
    ({"cuda": {"use_tf32": [1]}}, "'use_tf32' must be a bool, number or string"),
    ({"rocm": {}}, "unknown ONNX Runtime execution provider 'rocm'"),
])
def test_option_errors_name_the_key(options, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        ONNXRuntimeBackendConfig(provider_options=options)


def test_other_config_errors():
    with pytest.raises(ConfigError, match="graph_optimization_level 'all'"):
        ONNXRuntimeBackendConfig(graph_optimization_level="all")
    with pytest.raises(ConfigError, match="transformer_optimizer model type 'roberta'"):
        ONNXRuntimeBackendConfig(transformer_optimizer="roberta")
    with pytest.raises(ConfigError, match="use_cuda_graphs needs a GPU execution provider"):
        ONNXRuntimeBackendConfig(use_cuda_graphs=True, execution_provider="cpu")
    with pytest.raises(ConfigError, match="has no field provider_option"):
        ONNXRuntimeBackendConfig.from_dict({"provider_option": {}})


def test_session_providers_for_cuda_graphs_on_a_stream(tmp_path):
    names, options = session_providers(ONNXExecutionProvider.CUDA, {"CUDAExecutionProvider": {"use_tf32": False}},
                                       1, 12345, True, tmp_path, tf32=True)
    assert names == ["CUDAExecutionProvider"]
    assert options == [{"device_id": "1", "user_compute_stream": "12345", "has_user_compute_stream": "1",
                        "enable_cuda_graph": "1", "use_tf32": "0"}]
    # without use_tf32 in the options, the backend's (torch's matmul setting) holds
    _, (cuda,) = session_providers(ONNXExecutionProvider.CUDA, {}, 0, None, False, tmp_path, tf32=True)
    assert cuda == {"device_id": "0", "use_tf32": "1"}


def test_session_providers_for_tensorrt_keep_caches_under_the_artifacts(tmp_path):
    names, (trt, cuda) = session_providers(
        ONNXExecutionProvider.TENSORRT,
        {"TensorrtExecutionProvider": {"trt_fp16_enable": True, "trt_timing_cache_enable": False}}, 0, None, False,
        tmp_path)
    assert names == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]   # CUDA behind it, never the CPU
    assert trt == {"device_id": "0", "trt_engine_cache_enable": "1", "trt_timing_cache_enable": "0",
                   "trt_engine_cache_path": str(tmp_path / "trt_cache"),
                   "trt_timing_cache_path": str(tmp_path / "trt_cache"), "trt_fp16_enable": "1"}
    assert (tmp_path / "trt_cache").is_dir() and cuda == {"device_id": "0", "use_tf32": "0"}


def test_graph_optimization_level_reaches_the_session(tmp_path):
    model = MLP(WIDTH).eval()
    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(graph_optimization_level="disable_all"))
    backend.build(model, store(model), CPU, tmp_path)
    level = backend._session.get_session_options().graph_optimization_level
    assert level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def test_the_session_uses_torch_s_threads_which_sleep_when_a_call_returns_unless_spinning_is_allowed(tmp_path):
    """ORT's default leaves its threads spinning after a call and slows what runs next in the process; here
    they sleep, and they are as many as torch's, in the build and in the restore that deploys it."""
    model = MLP(WIDTH).eval()
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        quiet = ONNXRuntimeBackend().build(model, store(model), CPU, tmp_path / "quiet")
        spinning = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(allow_spinning=True)).build(
            model, store(model), CPU, tmp_path / "spinning")
        state, artifacts = spinning.export()
        restored = ONNXRuntimeBackend(ONNXRuntimeBackendConfig.from_dict(spinning.config.to_dict()))
        restored.restore(model, state, artifacts, CPU, tmp_path / "restored")
    finally:
        torch.set_num_threads(saved)
    for backend, spin in ((quiet, "0"), (spinning, "1"), (restored, "1")):
        options = backend._session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == spin
        assert options.intra_op_num_threads == 1
    assert ONNXRuntimeBackendConfig.from_dict({}).allow_spinning is False   # a checkpoint from before: off


def test_a_gpu_provider_on_a_cpu_device_is_a_build_error(tmp_path, monkeypatch):
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(execution_provider="cuda"))
    model = MLP(WIDTH).eval()
    with pytest.raises(BuildError, match="CUDAExecutionProvider cannot serve tensors on cpu"):
        backend.build(model, store(model), CPU, tmp_path)


# ----- IO binding on the CPU EP --------------------------------------------------------------


def test_calls_bind_tensors_and_never_go_through_numpy(built, monkeypatch):
    model, backend = built

    def no_numpy(*_, **__):
        raise AssertionError("a tensor went through numpy")

    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)
    monkeypatch.setattr(type(backend._session), "run", no_numpy)
    for bs in (2, 3, 5):                                   # 3 was never recorded: the batch axis is dynamic
        x = torch.randn(bs, WIDTH)
        out = backend.infer(x)
        with torch.no_grad():
            torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
        # ONNX Runtime wrote straight into the torch tensor that was returned
        assert backend._bound._binding.get_outputs()[0].data_ptr() == out.data_ptr()
    assert backend._bound.ordered_by == "none"                 # no streams on the CPU


def test_outputs_of_one_call_survive_the_next(built):
    model, backend = built
    x1, x2 = torch.randn(4, WIDTH), torch.randn(4, WIDTH)
    out1 = backend.infer(x1)
    expected = out1.clone()
    backend.infer(x2)
    torch.testing.assert_close(out1, expected, rtol=0, atol=0)


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.randn(3, WIDTH, dtype=torch.float64), r"input 'input_0' is torch.float64; the ONNX model takes torch.float32"),
    (lambda: torch.randn(WIDTH, 3).t(), r"input 'input_0' is not contiguous"),
    (lambda: torch.randn(3, WIDTH + 1), r"input 'input_0' has shape \[3, 17\]; the ONNX model takes"),
    (lambda: torch.randn(3, WIDTH, device="meta"), r"input 'input_0' is on meta; the session runs on cpu"),
])
def test_mismatched_inputs_are_errors_never_copies(built, bad, message):
    _, backend = built
    with pytest.raises(InputMismatchError, match=message):
        backend.infer(bad())


def cast_model(path, dtype: int, op="Cast") -> str:
    """in (dtype, [n]) -> out: float32 of in, and NonZero(in) (a shape only known after the run)."""
    inp = helper.make_tensor_value_info("x", dtype, ["n"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    nz = helper.make_tensor_value_info("nz", TensorProto.INT64, [1, None])
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT),
             helper.make_node("NonZero", ["y"], ["nz"])]
    graph = helper.make_graph(nodes, "cast", [inp], [out, nz])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("dtype, onnx_type", [(torch.float16, TensorProto.FLOAT16),
                                              (torch.bfloat16, TensorProto.BFLOAT16),
                                              (torch.int64, TensorProto.INT64)])
def test_half_and_bfloat16_inputs_bind_with_their_element_type(tmp_path, dtype, onnx_type):
    session = ort.InferenceSession(cast_model(tmp_path / "m.onnx", onnx_type), providers=["CPUExecutionProvider"])
    bound = BoundSession(ort, session, CPU, None, None, [])
    x = torch.tensor([0.0, 1.5, -2.0, 0.0, 3.0]).to(dtype)
    y, nz = bound.run({"x": x})
    assert y.dtype == torch.float32 and y.shape == (5,)
    torch.testing.assert_close(y, x.float(), rtol=0, atol=0)
    # NonZero's length is unknown before the run: ONNX Runtime allocates it, torch takes it over (DLPack)
    torch.testing.assert_close(nz, torch.nonzero(x.float()).T, rtol=0, atol=0)
    x2 = torch.tensor([1, 1, 0]).to(dtype)
    y2, nz2 = bound.run({"x": x2})
    torch.testing.assert_close(nz, torch.tensor([[1, 2, 4]]), rtol=0, atol=0)   # the first output is still intact
    torch.testing.assert_close(nz2, torch.tensor([[0, 1]]), rtol=0, atol=0)
    with pytest.raises(InputMismatchError, match=r"input 'x' is torch.float32"):
        bound.run({"x": torch.zeros(3) if dtype != torch.float32 else torch.zeros(3, dtype=torch.float16)})
    with pytest.raises(InputMismatchError, match=r"takes input 'x', which this call does not provide"):
        bound.run({"input_0": x})


def test_checkpoint_state_rebuilds_the_session(built, tmp_path):
    model, backend = built
    state, artifacts = backend.export()
    assert set(artifacts) == {"model.onnx"} and "exported" in state
    again = ONNXRuntimeBackend(backend.config)
    again.restore(model, state, artifacts, CPU, tmp_path)
    again.activate()
    x = torch.randn(7, WIDTH)
    torch.testing.assert_close(again.infer(x), backend.infer(x), rtol=0, atol=0)


def test_transformer_optimizer_fuses_the_tiny_bert_and_its_checkpoint_loads(tmp_path):
    import aitune_ray as ait
    from examples.bert.model import make_data, make_model
    from tests.helpers import FAST_MEASURE

    model = make_model("tiny")
    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False, transformer_optimizer="bert"))
    strategy = ait.OneBackendStrategy(backend, measure_config=FAST_MEASURE).enable_performance_validation(False)
    wrapped = ait.Module(model, "bert", strategy=strategy)
    ait.tune(wrapped, make_data("tiny", batch_sizes=(2, 4), per_batch_size=1), device="cpu",
             executor=ait.InlineExecutor(), call_as_given=True)
    built = wrapped.backend
    optimized = onnx.load(str(built._exported.path))
    assert {"SkipLayerNormalization", "BiasGelu"} <= {n.op_type for n in optimized.graph.node}
    # only the operator sets it uses, so that a checkpoint load does not take it for a custom-op model
    assert {o.domain for o in optimized.opset_import} == {"", "com.microsoft"}
    ait.save(wrapped, tmp_path / "bert.ait")
    loaded = ait.load(ait.Module(make_model("tiny", seed=3), "bert"), tmp_path / "bert.ait")
    assert isinstance(loaded.backend, ONNXRuntimeBackend)
    item = make_data("tiny", batch_sizes=(3,), per_batch_size=1, seed=5)[0]
    with torch.no_grad():
        torch.testing.assert_close(loaded(**item), model(**item), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config, device, version, opset", [
    ({}, "cuda", "1.31.1", 23),                                  # a GPU EP that runs ONNX's Attention op
    ({}, "cuda", "1.24.4", None),                                # older: Attention would run on the CPU
    ({}, "cuda", "1.27rc1", 23),                                 # a pre-release of 1.27
    ({}, "cuda", "unknown", None),                               # a version it cannot read: the default
    ({}, "cpu", "1.31.1", None),                                 # the CPU EP keeps the exporter's default
    ({"use_dynamo": False}, "cuda", "1.31.1", None),             # the TorchScript exporter: its own default
    ({"opset_version": 18}, "cuda", "1.31.1", 18),               # the config's own choice wins
])
def test_export_opset_is_the_attention_opset_where_onnx_runtime_runs_it_on_the_gpu(config, device, version, opset,
                                                                                   monkeypatch):
    monkeypatch.setattr(ort, "__version__", version)
    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(**config))
    assert backend._opset(torch.device(device)) == opset


def test_transformer_dimensions_are_checked():
    assert ONNXRuntimeBackendConfig(transformer_optimizer="vit", transformer_heads=12, transformer_hidden=768)
    with pytest.raises(ConfigError, match="multiple"):
        ONNXRuntimeBackendConfig(transformer_optimizer="vit", transformer_heads=12, transformer_hidden=100)
    with pytest.raises(ConfigError, match="negative"):
        ONNXRuntimeBackendConfig(transformer_heads=-1)


def test_a_model_the_attention_opset_does_not_suit_is_exported_again_at_the_default(monkeypatch, caplog, tmp_path):
    """ONNX Runtime's Attention op takes no (batch, 1, 1, seq) padding mask: the tiny BERT's opset-23 export
    fails at its first run, and the backend this chose opset 23 by itself exports again, at the default."""
    from examples.bert.model import make_data, make_model

    model = make_model("tiny").eval()
    samples = SampleStore()
    with torch.no_grad():
        for item in make_data("tiny", batch_sizes=(2, 4), per_batch_size=1):
            samples.samples.append(Sample((), item, model(**item), item["input_ids"].shape[0]))
    chosen = []
    monkeypatch.setattr(ONNXRuntimeBackend, "_opset", lambda self, device: chosen.append(23) or 23)
    backend = ONNXRuntimeBackend().build(model, samples, torch.device("cpu"), tmp_path / "chosen")
    assert chosen == [23] and "the opset-23 export does not run here" in caplog.text
    exported = onnx.load(str(backend._exported.path), load_external_data=False)
    assert "Attention" not in {n.op_type for n in exported.graph.node}
    item = make_data("tiny", batch_sizes=(4,), per_batch_size=1, seed=5)[0]
    with torch.no_grad():
        torch.testing.assert_close(backend.infer(**item), model(**item), rtol=1e-4, atol=1e-4)
    # a config that names opset 23 keeps it (and the candidate then fails its correctness check)
    monkeypatch.undo()
    explicit = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(opset_version=23))
    explicit.build(model, samples, torch.device("cpu"), tmp_path / "explicit")
    exported = onnx.load(str(explicit._exported.path), load_external_data=False)
    assert "Attention" in {n.op_type for n in exported.graph.node}
    with pytest.raises(Exception, match="attn_mask"):
        explicit.infer(**item)
