"""The official OpenAI Python SDK, unchanged, against the relay's first video format.

Run by `cargo xtask ci` with RELAY_BASE_URL and RELAY_KEY set; exits non-zero on any failure.
"""

import json
import os
import struct
import sys
import tempfile
import time
import urllib.request
import zlib

import openai
from openai import OpenAI, omit


def png(width: int, height: int) -> bytes:
    """A small RGB PNG."""
    raw = b"".join(b"\x00" + bytes((x * 7 + y * 3) % 256 for x in range(width * 3)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


PASSED = 0


def check(cond: bool, what: str) -> None:
    global PASSED
    if not cond:
        print(f"FAIL: {what}")
        print(f"openai-sdk: {PASSED} passed, 1 failed")
        sys.exit(1)
    PASSED += 1
    print(f"ok: {what}")


def main() -> None:
    client = OpenAI(base_url=os.environ["RELAY_BASE_URL"] + "/v1", api_key=os.environ["RELAY_KEY"], max_retries=0)
    with tempfile.TemporaryDirectory() as tmp:
        frame = os.path.join(tmp, "frame.png")
        with open(frame, "wb") as f:
            f.write(png(64, 36))

        with open(frame, "rb") as image:
            video = client.videos.create(model="model_h3", prompt="a paper boat on a pond", seconds="8", input_reference=image)
        check(video.id.startswith("video_"), "videos.create returns a video id")
        check(video.status in ("queued", "in_progress"), f"new video is queued ({video.status})")
        check(str(video.seconds) == "8", "seconds is kept")

        again = client.videos.retrieve(video.id)
        check(again.id == video.id, "videos.retrieve finds it")

        raw = client.videos.with_raw_response.retrieve(video.id)
        if raw.parse().status in ("queued", "in_progress"):
            check(raw.headers.get("openai-poll-after-ms") == "5000", "an unfinished video's read carries openai-poll-after-ms")

        # The relay asks for 5 s between polls; the tasks take 1 s. A poll helper that waited
        # its own default (1 s) would be done sooner.
        started = time.monotonic()
        polled = client.videos.create_and_poll(model="model_h3", prompt="a kite over dunes", seconds="5", size="1280x720")
        waited = time.monotonic() - started
        check(polled.status == "completed", f"create_and_poll ends completed ({polled.status})")
        check(polled.progress == 100, "progress reaches 100")
        check(waited >= 4.5, f"create_and_poll waits as openai-poll-after-ms asks ({waited:.1f} s)")
        done = client.videos.with_raw_response.retrieve(polled.id)
        check(done.headers.get("openai-poll-after-ms") is None, "a completed video's read has no openai-poll-after-ms")

        sheet = client.videos.download_content(polled.id, variant="spritesheet").read()
        check(sheet[:8] == b"\x89PNG\r\n\x1a\n", "the spritesheet is a PNG")

        remixed = client.videos.remix(polled.id, prompt="the kite at night")
        check(remixed.remixed_from_video_id == polled.id, "videos.remix names its source")
        remixed = client.videos.poll(remixed.id)
        check(remixed.status == "completed" and str(remixed.seconds) == "5", f"the remix completes ({remixed.status})")

        # The SDK's typed video={"id": ...} is refused by the SDK itself (it expects a file
        # there), so the reference goes as the body field it would have sent: video[id].
        edited = client.videos.edit(prompt="the kite in rain", video=omit, extra_body={"video": {"id": polled.id}})
        check(getattr(edited, "edited_from_video_id", None) == polled.id, "videos.edit names its source")
        edited = client.videos.poll(edited.id)
        check(edited.status == "completed" and edited.prompt == "the kite in rain", f"the edit completes ({edited.status})")

        extended = client.videos.extend(prompt="the kite lands", seconds="8", video=omit, extra_body={"video": {"id": polled.id}})
        check(str(extended.seconds) == "13", f"an extension's seconds is the stitched total ({extended.seconds})")
        extended = client.videos.poll(extended.id)
        check(extended.status == "completed", f"the extension completes ({extended.status})")
        check(getattr(extended, "extended_from_video_id", None) == polled.id, "videos.extend names its source")

        clip = os.path.join(tmp, "clip.mp4")
        client.videos.download_content(polled.id).write_to_file(clip)
        with open(clip, "rb") as upload:
            try:
                client.videos.edit(prompt="x", video=upload)
                check(False, "an uploaded source video is refused")
            except openai.BadRequestError as e:
                check(e.status_code == 400 and e.param == "video", "an uploaded source video is refused naming video")

        with open(clip, "rb") as upload:
            character = client.videos.create_character(name="Kite", video=upload)
        check(bool(character.id) and character.name == "Kite", "videos.create_character creates one")
        got = client.videos.get_character(character.id)
        check(got.id == character.id and got.name == "Kite" and got.created_at == character.created_at, "videos.get_character reads it back")
        try:
            client.videos.get_character("char_nope")
            check(False, "an unknown character is 404")
        except openai.NotFoundError:
            check(True, "an unknown character is 404")

        ids = [v.id for v in client.videos.list(limit=1)]
        check(video.id in ids and polled.id in ids, "videos.list pages through every video")

        content = client.videos.download_content(polled.id)
        data = content.read()
        check(len(data) > 1000 and data[4:8] == b"ftyp", f"download_content gives an MP4 ({len(data)} bytes)")
        out = os.path.join(tmp, "video.mp4")
        content.write_to_file(out)
        check(os.path.getsize(out) == len(data), "write_to_file writes the whole video")

        thumb = client.videos.download_content(polled.id, variant="thumbnail").read()
        check(thumb[:8] == b"\x89PNG\r\n\x1a\n", "the thumbnail is a PNG")

        deleted = client.videos.delete(polled.id)
        check(deleted.deleted, "videos.delete deletes")

    # 429: the SDK's own retry waits for retry-after and then succeeds.
    base = os.environ["RELAY_BASE_URL"]
    req = urllib.request.Request(
        base + "/admin/keys",
        data=json.dumps({"name": "slow", "rate_limit": {"rps": 1, "burst": 1}}).encode(),
        headers={"Authorization": "Bearer " + os.environ["RELAY_ADMIN_TOKEN"], "Content-Type": "application/json"},
    )
    slow_key = json.load(urllib.request.urlopen(req))["key"]
    no_retry = OpenAI(base_url=base + "/v1", api_key=slow_key, max_retries=0)
    no_retry.videos.list()
    try:
        no_retry.videos.list()
        check(False, "a second request within the burst is rate limited")
    except openai.RateLimitError as e:
        check(e.status_code == 429 and e.response.headers.get("retry-after") is not None, "429 carries retry-after")
    retrying = OpenAI(base_url=base + "/v1", api_key=slow_key, max_retries=3)
    started = time.monotonic()
    page = retrying.videos.list()
    waited = time.monotonic() - started
    check(page is not None and waited >= 0.3, f"the SDK retries after the given delay ({waited:.2f} s)")
    print(f"openai-sdk: {PASSED} passed, 0 failed")


if __name__ == "__main__":
    main()
