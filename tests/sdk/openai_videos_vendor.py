"""The official OpenAI Python SDK, unchanged, against a relay whose `model_h3` is served by a
video vendor's channel (`cargo xtask fake-veo` behind it): create, poll to completed, download.

Run by `cargo xtask sdk` (part of ci) with RELAY_BASE_URL, RELAY_KEY and RELAY_VENDOR_MP4 (the
file the vendor's fake serves as every result) set; exits non-zero on any failure.
"""

import os
import sys

from openai import OpenAI

PASSED = 0


def check(cond: bool, what: str) -> None:
    global PASSED
    if not cond:
        print(f"FAIL: {what}")
        print(f"openai-sdk (vendor): {PASSED} passed, 1 failed")
        sys.exit(1)
    PASSED += 1
    print(f"ok: {what}")


def main() -> None:
    client = OpenAI(base_url=os.environ["RELAY_BASE_URL"] + "/v1", api_key=os.environ["RELAY_KEY"], max_retries=0)
    with open(os.environ["RELAY_VENDOR_MP4"], "rb") as f:
        expected = f.read()

    video = client.videos.create(model="model_h3", prompt="a lighthouse at dusk", seconds="8", size="1280x720")
    check(video.id.startswith("video_"), "videos.create returns a video id")
    check(video.status in ("queued", "in_progress"), f"the new video is queued ({video.status})")
    check(str(video.seconds) == "8" and video.size == "1280x720", "seconds and size are kept")

    done = client.videos.poll(video.id)
    check(done.status == "completed", f"videos.poll ends completed ({done.status})")
    check(done.progress == 100, "progress reaches 100")

    content = client.videos.download_content(video.id).read()
    check(content == expected, f"download_content is the vendor's MP4 ({len(content)} of {len(expected)} bytes)")

    print(f"openai-sdk (vendor): {PASSED} passed, 0 failed")


if __name__ == "__main__":
    main()
