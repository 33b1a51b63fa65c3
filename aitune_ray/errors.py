"""The one exception hierarchy of aitune-ray."""


class AITuneRayError(Exception):
    """Base class of every error raised by aitune-ray."""


class ConfigError(AITuneRayError, ValueError):
    """A configuration value, job file key or argument is invalid."""


class NotCallableError(ConfigError, TypeError):
    """An object given to be called (inspect's or profile's function) is not callable: a TypeError, as calling it
    raises in AITune, and a ConfigError."""


class ModuleStateError(ConfigError, RuntimeError):
    """A Module method called in a state that does not allow it (activate() before tuning, leaving a tuned
    state without force=True): a RuntimeError as AITune raises, and a ConfigError."""


class DeviceError(AITuneRayError, ValueError):
    """A device was asked for that this machine does not have."""


class DatasetError(AITuneRayError, ValueError):
    """The dataset is empty, or an item cannot be passed to the tuned function."""


class RecordingError(AITuneRayError, ValueError):
    """A module has no recorded samples, or a sample cannot be recorded (a ValueError, as AITune raises)."""


class MissingDependencyError(AITuneRayError, ImportError):
    """An optional library a backend needs is not installed."""

    def __init__(self, package: str, extra: str, what: str = ""):
        self.package = package
        self.extra = extra
        need = f" for {what}" if what else ""
        super().__init__(
            f"{package} is not installed{need}; install it with: pip install 'aitune-ray[{extra}]'"
        )
        self._made_with = (package, extra, what)

    def __reduce__(self):   # copied and pickled as it was made (its __init__ takes more than the message)
        return type(self), self._made_with


class BuildError(AITuneRayError, RuntimeError):
    """A backend failed to build (raised, crashed, timed out or ran out of memory); a RuntimeError, as AITune's."""


class NotApplicableError(BuildError):
    """The backend built, but does not apply to this module (a quantizer that found no layer to change)."""


class ExportError(BuildError):
    """A model could not be exported (ONNX); ``step`` names where it failed."""

    def __init__(self, step: str, message: str):
        self.step = step
        super().__init__(message)

    def __reduce__(self):   # copied and pickled as it was made (its __init__ takes more than the message)
        return type(self), (self.step, str(self))


class InputMismatchError(AITuneRayError, ValueError):
    """A call's tensor does not match what a built backend takes (device, dtype, layout, shape)."""


class CorrectnessError(AITuneRayError, RuntimeError):
    """A backend's outputs differ from eager outputs beyond tolerance (a RuntimeError, as AITune raises)."""


class CheckpointError(AITuneRayError):
    """A checkpoint cannot be written or read."""


class CheckpointTruncatedError(CheckpointError):
    """The checkpoint file is cut short or is not a checkpoint at all."""


class CheckpointIntegrityError(CheckpointError):
    """A part of the checkpoint does not match its recorded SHA-256."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint belongs to another model (names or shapes differ)."""


class CheckpointVersionError(CheckpointError):
    """The checkpoint was written by a newer format version."""


class UnknownClassError(CheckpointError):
    """A checkpoint names a backend or kernel provider class that is neither registered nor allowed."""


class CheckpointSignatureError(CheckpointError):
    """A signing key was given and the checkpoint is unsigned or its HMAC does not match."""


class RunFolderError(AITuneRayError):
    """A run folder cannot be used: it belongs to another job, model or package version, or is damaged."""


class ClusterError(AITuneRayError):
    """The Ray cluster cannot be reached or used."""


class GPUKindError(ClusterError, DeviceError):
    """No live node has GPUs of the kind the job targets (a job's mistake: the command exits 2)."""


class LatencyBudgetError(AITuneRayError, RuntimeError):
    """No candidate meets a LatencyBudgetStrategy's latency budget (a RuntimeError, as in AITune)."""


class AbsentNameError(AITuneRayError, ImportError):
    """A name of one of AITune's module paths that has no counterpart here (raised where it is imported or
    read, saying why and what to use; the list is aitune_ray.aitune_paths.ABSENT)."""
