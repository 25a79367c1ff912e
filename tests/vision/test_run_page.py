"""The run page shows a group's images from the run's own folder, and serves nothing else under that name."""

from __future__ import annotations

import http.client
import os

import pytest

from kitae.store.images import IMAGES_DIR, RunImages
from tests.vision.pictures import MARKUP, data_url, draw, image_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vision") / "runs"
    image_run(root)
    return root


def stored(runs) -> str:
    return sorted(os.listdir(runs / "vision-run" / IMAGES_DIR))[0]


def test_a_picture_is_stored_once_by_content(tmp_path):
    pic = draw(tmp_path / "a.png")
    images = RunImages(tmp_path / "run")
    name = images.add(str(pic))
    assert images.add(data_url(pic)) == name  # the same picture from a data URL: the same file
    assert (tmp_path / "run" / IMAGES_DIR / name).read_bytes() == pic.read_bytes()
    assert os.listdir(tmp_path / "run" / IMAGES_DIR) == [name]


def test_the_group_names_its_stored_images_and_they_are_served(serve, runs):
    s = serve(runs)
    group = s.http.get("/api/runs/vision-run/groups", params={"order": "step"}).json()["groups"]
    with_image = next(g for g in group if g["item"].get("images"))
    name = with_image["item"]["images"][0]
    assert with_image["messages"][0]["content"][0] == {"type": "image", "image": name}  # no path of the trainer's
    r = s.http.get(f"/api/runs/vision-run/images/{name}")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert r.content == (runs.parent / "data" / "red.png").read_bytes()
    assert r.headers["content-disposition"].startswith("inline")


@pytest.mark.parametrize("path", [
    "/api/runs/vision-run/images/..%2Frun.db",  # a path, unquoted by the server: no route matches
    "/api/runs/vision-run/images/run.db",  # a file of the run that is not a stored image
    "/api/runs/vision-run/images/..",
    "/api/runs/vision-run/images/%2Fetc%2Fpasswd",
    "/api/runs/vision-run/images/" + "0" * 32 + ".png",  # the right shape, no such file
    "/api/runs/vision-run/images/LINK",  # a link in the images folder that points out of it
    "/api/runs/..%2Fvision-run/images/NAME",
])
def test_the_image_endpoint_refuses_anything_outside_the_run_images(serve, runs, path):
    folder = runs / "vision-run" / IMAGES_DIR
    link = "a" * 32 + ".png"
    if not (folder / link).is_symlink():
        (folder / link).symlink_to(runs.parent / "data" / "red.png")  # a real image, but outside the run
    s = serve(runs)
    conn = http.client.HTTPConnection("127.0.0.1", s.server.server_address[1])
    conn.request("GET", path.replace("LINK", link).replace("NAME", stored(runs)))  # sent as is
    assert conn.getresponse().status == 404
    conn.close()


def test_the_group_browser_shows_the_image_beside_the_samples(serve, runs, page):
    s = serve(runs)
    page.goto(s.url + "#/run/vision-run/groups?order=step")
    page.wait_for_selector("tr[data-group] img.thumb")
    page.locator("tr[data-group] a").first.click()
    page.wait_for_selector(".with-images .thumbs.beside img.thumb")
    # decoded: the browser fetched a real picture (48x48) from the run's folder, and it stands beside the samples
    size = page.locator(".thumbs.beside img.thumb").evaluate("img => [img.complete, img.naturalWidth]")
    assert size == [True, 48]
    assert page.locator(".with-images .samples .sample").count() == 2
    # the question's markup is text, not an element
    assert MARKUP in page.locator("pre.prompt").inner_text()
    assert page.evaluate("() => window.__kitae_pwned") is None
    page.locator(".thumbs.beside img.thumb").click()  # click to enlarge
    page.wait_for_selector(".lightbox img")
    width = page.locator(".lightbox img").evaluate("img => img.getBoundingClientRect().width")
    assert width > 200
    from tests.plugins.run_page import screenshot

    screenshot(page, "vision-group")
    page.keyboard.press("Escape")
    assert page.locator(".lightbox").count() == 0
