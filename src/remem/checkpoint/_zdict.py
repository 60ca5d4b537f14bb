"""zstd with remem's dictionary, for the short values a checkpoint holds (one message is a few hundred
bytes, where zlib cannot pay for its own header and the message's field names).

The dictionary is raw content: the serialized envelopes of empty LangChain messages, of graph input and of
checkpoint metadata, which every stored message and metadata repeats; nothing of any user's text. It is
part of the stored format: a blob written with it is read with exactly these bytes, so it never changes
(a new dictionary would be a new format byte in :mod:`._codec`). Frames are written without magic number,
checksum or dictionary id (the format byte says what they are): 6-8 bytes less per value.

:func:`compress_after` adds one value of the same thread after the dictionary (its *base*): a value that
repeats most of it (a user's message once LangGraph gave it an id, after the message as sent) then costs
the bytes that differ, not a second copy of its text.
"""

from __future__ import annotations

import threading

import zstandard

__all__ = ["compress", "compress_after", "decompress", "decompress_after"]

LEVEL = 3
"""Level 19 saves under 1% more on messages at several times the CPU (bench/checkpoint.py --text random)."""

_DICT = bytes.fromhex(
    "c7f30594bc6c616e67636861696e5f636f72652e6d657373616765732e746f6f6cab546f6f6c4d65737361676589a7636f6e7465"
    "6e74a0b16164646974696f6e616c5f6b776172677380b1726573706f6e73655f6d6574616461746180a474797065a4746f6f6ca4"
    "6e616d65c0a26964d92430303030303030302d303030302d303030302d303030302d303030303030303030303030ac746f6f6c5f"
    "63616c6c5f6964d92430303030303030302d303030302d303030302d303030302d303030303030303030303030a8617274696661"
    "6374c0a6737461747573a773756363657373b36d6f64656c5f76616c69646174655f6a736f6ec7ad0594be6c616e67636861696e"
    "5f636f72652e6d657373616765732e73797374656dad53797374656d4d65737361676586a7636f6e74656e74a0b1616464697469"
    "6f6e616c5f6b776172677380b1726573706f6e73655f6d6574616461746180a474797065a673797374656da46e616d65c0a26964"
    "d92430303030303030302d303030302d303030302d303030302d303030303030303030303030b36d6f64656c5f76616c69646174"
    "655f6a736f6ec801160594ba6c616e67636861696e5f636f72652e6d657373616765732e6169a941494d65737361676589a7636f"
    "6e74656e74a0b16164646974696f6e616c5f6b776172677380b1726573706f6e73655f6d6574616461746180a474797065a26169"
    "a46e616d65c0a26964d92430303030303030302d303030302d303030302d303030302d303030303030303030303030aa746f6f6c"
    "5f63616c6c739184a46e616d65a0a46172677380a26964d92430303030303030302d303030302d303030302d303030302d303030"
    "303030303030303030a474797065a9746f6f6c5f63616c6cb2696e76616c69645f746f6f6c5f63616c6c7390ae75736167655f6d"
    "65746164617461c0b36d6f64656c5f76616c69646174655f6a736f6e82a4726f6c65a475736572a7636f6e74656e74a084a6736f"
    "75726365a46c6f6f70a47374657000a7706172656e747380a672756e5f6964d92430303030303030302d303030302d303030302d"
    "303030302d30303030303030303030303083a6736f75726365a5696e707574a473746570ffa7706172656e747380c7d10594ba6c"
    "616e67636861696e5f636f72652e6d657373616765732e6169a941494d65737361676589a7636f6e74656e74a0b1616464697469"
    "6f6e616c5f6b776172677380b1726573706f6e73655f6d6574616461746180a474797065a26169a46e616d65c0a26964d9243030"
    "3030303030302d303030302d303030302d303030302d303030303030303030303030aa746f6f6c5f63616c6c7390b2696e76616c"
    "69645f746f6f6c5f63616c6c7390ae75736167655f6d65746164617461c0b36d6f64656c5f76616c69646174655f6a736f6ec7aa"
    "0594bd6c616e67636861696e5f636f72652e6d657373616765732e68756d616eac48756d616e4d65737361676586a7636f6e7465"
    "6e74a0b16164646974696f6e616c5f6b776172677380b1726573706f6e73655f6d6574616461746180a474797065a568756d616e"
    "a46e616d65c0a26964d92430303030303030302d303030302d303030302d303030302d303030303030303030303030b36d6f6465"
    "6c5f76616c69646174655f6a736f6e"
)
_PARAMS = zstandard.ZstdCompressionParameters.from_level(
    LEVEL, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=False, write_dict_id=False
)
_local = threading.local()  # zstandard's (de)compressors are not to be shared between threads


def _dict() -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(_DICT, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def _after(base: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(_DICT + base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def compress_after(base: bytes, data: bytes) -> bytes:
    """``data`` compressed with remem's dictionary followed by ``base`` (read with :func:`decompress_after`)."""
    return zstandard.ZstdCompressor(dict_data=_after(base), compression_params=_PARAMS).compress(data)


def decompress_after(base: bytes, data: bytes) -> bytes:
    d = zstandard.ZstdDecompressor(dict_data=_after(base), format=zstandard.FORMAT_ZSTD1_MAGICLESS)
    return d.decompress(data)


def compress(data: bytes) -> bytes:
    c = getattr(_local, "c", None)
    if c is None:
        c = _local.c = zstandard.ZstdCompressor(dict_data=_dict(), compression_params=_PARAMS)
    return c.compress(data)


def decompress(data: bytes) -> bytes:
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstandard.ZstdDecompressor(dict_data=_dict(), format=zstandard.FORMAT_ZSTD1_MAGICLESS)
    return d.decompress(data)
