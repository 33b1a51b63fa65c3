"""What a run folder holds, proven: a manifest of every file the project wrote there, with its SHA-256, signed
with a key only this user can read.

``manifest.json`` lists each file by its relative name with the SHA-256 of the bytes written (null while a write
is under way, and for a crash report the faulthandler writes itself), and whether the folder is being cleared. Its
HMAC-SHA256 is keyed by a per-user secret: 32 random bytes in ``run-folder.key`` (mode 0600) in
``$AITUNE_RAY_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/aitune-ray``, else ``~/.config/aitune-ray`` (made on first use,
the folder mode 0700). Someone else who can write the run folder cannot read the key, so cannot write a manifest
this project accepts: a folder whose manifest does not verify is not the project's, and is never read, resumed or
cleared. A file is read back only through the manifest, its bytes checked against the hash recorded when it
was written; only the files named there are ever removed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from aitune_ray.errors import RunFolderError
from aitune_ray.runtime import confined

MANIFEST = "manifest.json"
LOCK = ".aitune-ray.lock"
#: Entries at the top of a run folder that are the project's without being listed: the lock file and a manifest
#: write under way.
RESERVED = (MANIFEST, LOCK, confined.part_name(MANIFEST))
KEY_FILE = "run-folder.key"
MANIFEST_LIMIT = 64 << 20
FORMAT = 2


def key_path() -> Path:
    folder = os.environ.get("AITUNE_RAY_CONFIG_DIR")
    if not folder:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        folder = os.path.join(base, "aitune-ray")
    return Path(folder) / KEY_FILE


def user_key() -> bytes:
    """This user's run-folder key, made on first use. Refused when someone else could read or replace it."""
    path = key_path()
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            _make_key(path)
            continue
        except OSError as exc:
            raise RunFolderError(f"the run-folder key {path} cannot be read ({exc.strerror or exc})") from exc
        try:
            info = os.fstat(fd)
            key = os.read(fd, 4096)
        finally:
            os.close(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077 or len(key) < 32:
            raise RunFolderError(f"the run-folder key {path} is not a private file of this user (mode 0600, at "
                                 "least 32 bytes); remove it, and a new one is made")
        return key
    raise RunFolderError(f"the run-folder key {path} cannot be made")


def _make_key(path: Path) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return   # made by another process meanwhile: read it
    except OSError as exc:
        raise RunFolderError(f"the run-folder key {path} cannot be made ({exc.strerror or exc}); set "
                             "AITUNE_RAY_CONFIG_DIR to a folder of yours") from exc
    with os.fdopen(fd, "wb") as out:
        out.write(secrets.token_bytes(32))
        out.flush()
        os.fsync(out.fileno())


def _signed(key: bytes, body: dict) -> str:
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key is given twice")
    return dict(pairs)


class Manifest:
    """The files of one run folder (name -> SHA-256, or None while unknown) and whether it is being cleared."""

    def __init__(self, files: dict[str, str | None] | None = None, clearing: bool = False):
        self.files, self.clearing = dict(files or {}), clearing

    def body(self) -> dict:
        return {"format": FORMAT, "files": dict(sorted(self.files.items())), "clearing": self.clearing}

    def write(self, root: int, key: bytes) -> None:
        body = self.body()
        data = json.dumps({**body, "hmac": _signed(key, body)}, indent=1, sort_keys=True) + "\n"
        confined.write(root, MANIFEST, [data.encode()])

    @classmethod
    def read(cls, root: int, key: bytes, where: Path) -> "Manifest | None":
        """The folder's manifest, verified; None where there is none. RunFolderError where it does not verify."""
        try:
            raw = confined.read(root, MANIFEST, limit=MANIFEST_LIMIT)
        except FileNotFoundError:
            return None
        except (OSError, confined.OutsideError) as exc:
            raise _not_ours(where, f"its {MANIFEST} cannot be read: {exc}") from None
        try:
            data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates,
                              parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            body = {"format": data["format"], "files": data["files"], "clearing": data["clearing"]}
            signature = data["hmac"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise _not_ours(where, f"its {MANIFEST} is not a manifest of aitune-ray") from None
        if body["format"] != FORMAT:
            raise _not_ours(where, f"its {MANIFEST} has format {str(body['format'])[:20]}, this aitune-ray writes "
                                   f"format {FORMAT}")
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _signed(key, body)):
            raise _not_ours(where, f"its {MANIFEST} is not signed with this user's key ({key_path()}): another "
                                   "user's or another machine's, or changed since it was written")
        files = body["files"]
        if not isinstance(files, dict) or not isinstance(body["clearing"], bool):
            raise _not_ours(where, f"its {MANIFEST} is not a manifest of aitune-ray")
        for name, digest in files.items():
            try:
                confined.parts(name)
            except confined.OutsideError as exc:
                raise _not_ours(where, f"its {MANIFEST} names a file outside it ({exc})") from None
            if digest is not None and not (isinstance(digest, str) and len(digest) == 64):
                raise _not_ours(where, f"its {MANIFEST} holds no SHA-256 for {name!r}")
        return cls(files, body["clearing"])


def _not_ours(where: Path, why: str) -> RunFolderError:
    return RunFolderError(f"{where} is not a run folder of aitune-ray that this user wrote ({why}); it is left "
                          "alone: remove it yourself or choose another --run-dir")
