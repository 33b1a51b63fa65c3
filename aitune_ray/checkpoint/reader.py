"""Reading a .ait archive: open it, check every member and the manifest, and extract parts checking SHA-256.

The checkpoint must be a regular file (a FIFO, a device or a symlink to one is refused before a read).
An archive of more entries than a checkpoint can hold (MAX_MEMBERS, read from the end record and the zip64
end record) or one that names several disks is refused before zipfile parses its central directory.
An archive is refused before anything is extracted when a member's name is not a plain relative path, when
two members share a name (exactly or by case), when a member is a symlink, a folder or encrypted, when a
part is not listed in the manifest exactly once under its own name, and when a part's sizes do not agree
(a zip bomb declares a small size, or inflates far beyond what it stores), and when a member's local header
does not repeat its central directory entry, when a member's name holds a NUL, when two members' bytes
overlap in the file (an overlapping zip extracts the same stretch many times: a zip bomb of small parts
that zipfile before Python 3.13 does not refuse), and when its members would inflate to more than
MAX_RATIO times the file in all. Reads never go past the size the manifest declares, and an archive
never writes more in all than its members hold. Parts are written only inside the folder the loader gives.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import struct
import zipfile
import zlib
from pathlib import Path

from aitune_ray.checkpoint import format as fmt
from aitune_ray.runtime import files
from aitune_ray.errors import CheckpointError, CheckpointIntegrityError, CheckpointTruncatedError

MAX_MANIFEST_BYTES = 4 << 20
MAX_HASH_BYTES = 256
MAX_RATIO = 100  # parts are stored uncompressed; one that would inflate more than this is refused
MAX_MEMBERS = 10_000  # manifest, hash, signature, and per module its weights and artifacts
END, END64, LOCATOR64 = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"

AITUNE_STATE = "state_dict.pt"   # what an AITune checkpoint pickles its state into


class CheckpointArchive:
    """An open checkpoint archive. Use as a context manager; nothing is extracted until asked."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.exists():
            raise CheckpointError(f"no checkpoint at {self.path}: the file does not exist")
        if self.path.is_dir():
            raise CheckpointError(f"{self.path} is a directory, not a checkpoint file")
        try:   # a FIFO or a device (a symlink to /dev/zero) is refused before anything reads it
            self._file = os.fdopen(files.open_regular(self.path), "rb")
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc.strerror or exc}") from exc
        try:
            self.size = os.fstat(self._file.fileno()).st_size
            count = declared_entries(self._file, str(self.path))
            if count is not None and count > MAX_MEMBERS:
                raise CheckpointError(f"{self.path} declares {count} zip entries, more than a checkpoint holds "
                                      f"({MAX_MEMBERS}); refused before reading them")
            try:
                self._zip = zipfile.ZipFile(self._file, "r")
            except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, OverflowError, struct.error,
                    IndexError, KeyError) as exc:
                raise CheckpointTruncatedError(f"{self.path} is truncated or is not an aitune-ray checkpoint "
                                               f"(not a readable zip archive: {exc})") from exc
            except OSError as exc:
                raise CheckpointError(f"cannot read checkpoint {self.path}: {exc}") from exc
        except BaseException:
            self._file.close()
            raise
        self._extracted = 0
        try:
            self._infos = self._check_members()
            self._check_headers()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "CheckpointArchive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()
        self._file.close()

    def _refuse(self, member: str, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: member {fmt.shown(member)} {problem}; the checkpoint is refused")

    def _check_members(self) -> dict[str, zipfile.ZipInfo]:
        infos: dict[str, zipfile.ZipInfo] = {}
        folded: dict[str, str] = {}
        for info in self._zip.infolist():
            name = info.filename
            if "\x00" in info.orig_filename:   # zipfile cuts a name at NUL: the stored name is another one
                raise self._refuse(info.orig_filename, "has a NUL character in its name")
            if not fmt.is_plain_member(name):
                raise self._refuse(name, "is not a plain relative path (no '..', no absolute path, no '\\')")
            if name in infos:
                raise self._refuse(name, "is stored twice")
            if name.casefold() in folded:
                raise self._refuse(name, f"collides with {fmt.shown(folded[name.casefold()])} (names differing "
                                         "only by case)")
            mode = info.external_attr >> 16
            if info.is_dir() or stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # symlinks have S_IFLNK
                raise self._refuse(name, "is a symlink, folder or special file, not a plain file")
            if info.flag_bits & 0x1:
                raise self._refuse(name, "is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise self._refuse(name, f"uses an unsupported compression (method {info.compress_type})")
            infos[name] = info
            folded[name.casefold()] = name
        total = self._parts_bytes(infos)   # the manifest is read under its own limit (MAX_MANIFEST_BYTES)
        if total > MAX_RATIO * max(self.size, 1):
            raise CheckpointError(f"{self.path}: its members would inflate {self.size} bytes to {total} in all "
                                  f"(more than {MAX_RATIO} times the file: a zip bomb); the checkpoint is refused")
        return infos

    @staticmethod
    def _parts_bytes(infos: dict[str, zipfile.ZipInfo]) -> int:
        """What extracting every part would write: the members' sizes, the manifest and its hashes aside."""
        small = (fmt.MANIFEST, fmt.MANIFEST_HASH, fmt.MANIFEST_SIGNATURE)
        return sum(info.file_size for name, info in infos.items() if name not in small)

    def _check_headers(self) -> None:
        """Every member's local header repeats its central directory entry, members lie one after the other
        without overlapping (each member's bytes are its own: one stretch of the file cannot be extracted
        twice), and the archive ends with its end record (no comment, nothing after): a damaged header is
        refused even where zipfile would not look."""
        raw = self._file
        raw.seek(-22, 2)
        end = raw.read(22)
        disks, here, total = struct.unpack("<I2H", end[4:12])
        if end[:4] != b"PK\x05\x06" or end[20:22] != b"\x00\x00" or disks or here != total or \
                total not in (len(self._infos), 0xFFFF):
            raise CheckpointIntegrityError(f"{self.path}: the zip end record is damaged or followed by data")
        spans = []
        for info in self._infos.values():
            if not 0 <= info.header_offset <= self.size - 30:
                raise CheckpointTruncatedError(f"{self.path} is truncated or damaged (member "
                                               f"{fmt.shown(info.filename)} starts at {info.header_offset}, "
                                               f"beyond the file's {self.size} bytes)")
            raw.seek(info.header_offset)
            header = raw.read(30)
            if len(header) < 30:
                raise CheckpointTruncatedError(f"{self.path} is truncated (member {fmt.shown(info.filename)})")
            (magic, version, flags, method, time, date, crc, packed, size, name_length,
             extra_length) = struct.unpack("<4s5H3I2H", header)
            year, month, day, hour, minute, second = info.date_time
            expected = (version == info.extract_version and flags == info.flag_bits
                        and method == info.compress_type
                        and (time, date) == ((hour << 11) | (minute << 5) | (second // 2),
                                             ((year - 1980) << 9) | (month << 5) | day))
            if not flags & 0x08:     # no data descriptor: the local header holds CRC and sizes
                expected = expected and crc == info.CRC and (0xFFFFFFFF in (packed, size) or (
                    packed, size) == (info.compress_size, info.file_size))
            dos_attributes = info.external_attr & 0xFFFF    # only 'archive' (0x20) is ever written
            if magic != b"PK\x03\x04" or not expected or raw.read(name_length) != _raw_name(info) or \
                    dos_attributes not in (0, 0x20):
                raise CheckpointIntegrityError(f"{self.path}: the zip header of member "
                                               f"{fmt.shown(info.filename)} is damaged")
            spans.append((info.header_offset, info.header_offset + 30 + name_length + extra_length
                          + info.compress_size, info.filename))
        self._check_spans(spans)

    def _check_spans(self, spans: list[tuple[int, int, str]]) -> None:
        """Members' (start, end) in the file: one after the other, all before the central directory."""
        spans.sort()
        directory = getattr(self._zip, "start_dir", self.size)
        for (_, end, name), (start, _, following) in zip(spans, spans[1:]):
            if end > start:
                raise self._refuse(name, f"overlaps member {fmt.shown(following)} in the file (an overlapping "
                                         "zip: the same bytes would be extracted twice)")
        if spans and spans[-1][1] > min(directory, self.size):
            raise self._refuse(spans[-1][2], "runs into the zip's central directory or past the end of the file")

    def manifest(self, signing_key: bytes | str | None = None) -> dict:
        """The manifest, checked against the stored hash (and, given a key, its signature), its format
        version, its schema and the members."""
        if fmt.MANIFEST not in self._infos and any(n.rsplit("/", 1)[-1] == AITUNE_STATE for n in self._infos):
            raise CheckpointError(f"{self.path} is an AITune checkpoint: it holds pickled objects ({AITUNE_STATE}) and "
                                  "is never loaded here; tune the model again with aitune_ray (wrap it in "
                                  "aitune_ray.Module, then aitune_ray.tune(...) and aitune_ray.save(...))")
        if fmt.MANIFEST not in self._infos:
            raise CheckpointTruncatedError(f"{self.path} has no {fmt.MANIFEST}: it is truncated or is not an "
                                           "aitune-ray checkpoint")
        data = self._read_small(fmt.MANIFEST, MAX_MANIFEST_BYTES)
        expected = None
        if fmt.MANIFEST_HASH in self._infos:
            expected = self._read_small(fmt.MANIFEST_HASH, MAX_HASH_BYTES).decode("ascii", "replace").strip()
        if signing_key is not None:
            recorded = None
            if fmt.MANIFEST_SIGNATURE in self._infos:
                recorded = self._read_small(fmt.MANIFEST_SIGNATURE, MAX_HASH_BYTES).decode("ascii", "replace")
            fmt.verify_signature(signing_key, data, recorded and recorded.strip(), str(self.path))
        manifest = fmt.parse_manifest(data, expected)
        self._check_parts(manifest)
        return manifest

    def _check_parts(self, manifest: dict) -> None:
        """Every part under its own name, listed once, with agreeing sizes; no member the manifest omits."""
        listed = {fmt.MANIFEST, fmt.MANIFEST_HASH, fmt.MANIFEST_SIGNATURE}
        for index, entry in enumerate(manifest["modules"]):
            parts = [(fmt.weights_member(index), entry["weights"])]
            parts += [(fmt.artifact_member(index, name), part) for name, part in entry["artifacts"].items()]
            for member, part in parts:
                if part["member"] != member:
                    raise self._refuse(part["member"], f"is listed for module {entry['path']!r} where "
                                                       f"{member!r} belongs")
                if member in listed:
                    raise self._refuse(member, "is listed twice in the manifest")
                listed.add(member)
                info = self._infos.get(member)
                if info is None:
                    raise CheckpointIntegrityError(f"part {member!r} is listed in the manifest but missing from "
                                                   f"{self.path}")
                if info.file_size != part["size"]:
                    raise self._refuse(member, f"declares {info.file_size} bytes in the archive but "
                                               f"{part['size']} in the manifest")
                if info.file_size > MAX_RATIO * max(info.compress_size, 1):
                    raise self._refuse(member, f"would inflate {info.compress_size} bytes to {info.file_size} "
                                               "(a zip bomb)")
        extra = sorted(set(self._infos) - listed)
        if extra:
            raise self._refuse(extra[0], "is not listed in the manifest")

    def _read_small(self, member: str, limit: int) -> bytes:
        if self._infos[member].file_size > limit:
            raise CheckpointError(f"{self.path}: {member} is implausibly large "
                                  f"({self._infos[member].file_size} bytes, at most {limit})")
        try:
            with self._zip.open(self._infos[member]) as source:
                data = source.read(limit + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
            raise CheckpointIntegrityError(f"part {member!r} of {self.path} is corrupted: {exc}") from exc
        if len(data) > limit:
            raise CheckpointError(f"{self.path}: {member} is implausibly large (over {limit} bytes)")
        return data

    def extract(self, part: dict, target: Path) -> Path:
        """Copy one part to target (a new file), checking its size and SHA-256; a mismatch removes target."""
        member = part["member"]
        budget = self._parts_bytes(self._infos)
        if self._extracted + part["size"] > budget:
            raise CheckpointError(f"{self.path}: extracting part {member!r} would write more than the "
                                  f"{budget} bytes the archive's members hold in all; refused")
        try:
            dst = os.fdopen(files.create_new(target), "wb")  # a new file: never one (or a symlink) already there
        except OSError as exc:
            raise CheckpointError(f"cannot extract part {member!r} of {self.path}: {exc}") from exc
        try:
            with dst, self._zip.open(self._infos[member]) as src:
                digest, size = fmt.copy_hashed(src, dst, limit=part["size"])
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
            _remove(target)
            raise CheckpointIntegrityError(f"part {member!r} of {self.path} is corrupted: {exc}") from exc
        except OSError as exc:
            _remove(target)
            raise CheckpointError(f"cannot extract part {member!r} of {self.path}: {exc}") from exc
        self._extracted += size
        if digest != part["sha256"] or size != part["size"]:
            _remove(target)
            raise CheckpointIntegrityError(f"part {member!r} of {self.path} does not match its recorded SHA-256 "
                                           "(it was changed or corrupted)")
        return target


def declared_entries(raw, where: str) -> int | None:
    """The entry count that the archive's end record (and zip64 end record) declares, read without parsing
    the central directory; None where no end record is found (zipfile then says what is wrong). An archive
    naming several disks is a CheckpointError."""
    size = raw.seek(0, 2)
    start = max(0, size - 22 - 0xFFFF)   # the end record, followed by a comment of at most 64 KiB
    raw.seek(start)
    tail = raw.read()
    at = tail.rfind(END)
    if at < 0 or len(tail) - at < 22:
        return None
    disk, first_disk, _, total = struct.unpack("<4H", tail[at + 4:at + 12])
    count = total
    locator = tail[at - 20:at] if at >= 20 else b""
    if locator[:4] == LOCATOR64:
        disk64, offset, disks = struct.unpack("<IQI", locator[4:20])
        if disk64 != 0 or disks > 1:
            raise CheckpointError(f"{where}: the zip64 end record names {disks} disks: a checkpoint is one file")
        if offset > size - 56:
            raise CheckpointTruncatedError(f"{where}: the zip64 end record is said to start at {offset}, beyond "
                                           f"the file's {size} bytes")
        raw.seek(offset)
        record = raw.read(56)
        if len(record) == 56 and record[:4] == END64:
            count = max(count, struct.unpack("<Q", record[32:40])[0])
    elif disk or first_disk:
        raise CheckpointError(f"{where}: the zip end record names disk {max(disk, first_disk)}: a checkpoint is one file")
    return count


def _raw_name(info: zipfile.ZipInfo) -> bytes:
    """The member name's bytes as stored: UTF-8 when flagged so, else code page 437."""
    return info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
