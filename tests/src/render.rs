//! A page rendered as a person sees it: headless Chromium's screenshot of an SVG or HTML file,
//! as RGB pixels. Shared by the picture tests of crates that cannot depend on this one
//! (`converse-topo`, `converse-trace`, `converse-bench`): each includes this file with
//! `#[path = ".../tests/src/render.rs"] mod render;` and has `png` as a dev-dependency.

// Not every test that includes the file uses every helper.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Pixels, row by row, 3 bytes each; width; height.
pub(crate) type Image = (Vec<u8>, u32, u32);

/// The Chromium command; `None`, saying so, when it is not installed.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok());
    if found.is_none() {
        converse::input::error_line(
            "SKIPPED the render: chromium is not installed (apt-get install chromium)",
        );
    }
    found
}

/// Render `page` (SVG or HTML) with headless Chromium in a `w`×`h` window, the screenshot
/// going to `dir`; `None`, saying so, when Chromium is not installed.
///
/// # Panics
/// When Chromium runs but leaves no readable screenshot (the test fails, naming why).
pub(crate) fn render(page: &Path, w: u32, h: u32, dir: &Path) -> Option<Image> {
    let stem = page
        .file_stem()
        .map_or("page".into(), |s| s.to_string_lossy());
    render_url(&format!("file://{}", page.display()), w, h, dir, &stem)
}

/// Headless Chromium in a `w`×`h` window on `url` (its scripts run), with `more` arguments.
fn headless(chromium: &str, url: &str, w: u32, h: u32, dir: &Path, more: &[String]) -> Output {
    // Bounded in time (`timeout` kills it); a profile of its own so parallel runs do not meet.
    Command::new("timeout")
        .args(["-k", "5", "60", chromium])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            // Without these the screenshot can be taken before every tile is painted: a
            // band at the bottom of the page came out white in about one run in six.
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--window-size={w},{h}"))
        .args(more)
        .arg(url)
        .output()
        .expect("chromium runs")
}

/// Render `url` (a `file://` address, perhaps with a `#` fragment the page's script reads)
/// as [`render`] does, the screenshot going to `dir/<name>.png`.
///
/// # Panics
/// When Chromium runs but leaves no readable screenshot.
pub(crate) fn render_url(url: &str, w: u32, h: u32, dir: &Path, name: &str) -> Option<Image> {
    let chromium = chromium()?;
    let png = dir.join(format!("{name}.png"));
    let out = headless(
        chromium,
        url,
        w,
        h,
        dir,
        &[format!("--screenshot={}", png.display())],
    );
    assert!(
        png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png).expect("the screenshot opens"),
    ));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let channels = info.color_type.samples();
    let rgb = buf[..info.buffer_size()]
        .chunks(channels)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    Some((rgb, info.width, info.height))
}

/// The document of `url` after its scripts ran, as HTML (what they wrote into attributes
/// included), in a `w`×`h` window; `None` when Chromium is not installed.
pub(crate) fn dump_dom(url: &str, w: u32, h: u32, dir: &Path) -> Option<String> {
    let chromium = chromium()?;
    let out = headless(chromium, url, w, h, dir, &["--dump-dom".to_owned()]);
    assert!(
        out.status.success(),
        "chromium --dump-dom: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The colour at (`x`, `y`), rounded to the nearest pixel.
pub(crate) fn pixel(img: &Image, x: f64, y: f64) -> (u8, u8, u8) {
    let (buf, w, _) = img;
    let i = 3 * (y.round() as usize * *w as usize + x.round() as usize);
    (buf[i], buf[i + 1], buf[i + 2])
}

/// Whether two colours are the same to the eye (antialiasing and PNG rounding aside).
pub(crate) fn near(a: (u8, u8, u8), b: (u8, u8, u8)) -> bool {
    let d = |x: u8, y: u8| (i32::from(x) - i32::from(y)).abs();
    d(a.0, b.0) + d(a.1, b.1) + d(a.2, b.2) < 40
}

/// How many pixels of the row band `y0..y1` between `x0..x1` have colour `c`.
pub(crate) fn count(
    img: &Image,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    c: (u8, u8, u8),
) -> usize {
    let mut n = 0;
    let mut y = y0;
    while y < y1 {
        let mut x = x0;
        while x < x1 {
            n += usize::from(near(pixel(img, x, y), c));
            x += 1.0;
        }
        y += 1.0;
    }
    n
}

/// A text of a picture and the box the browser laid it out in: text, x, y, width, height, in
/// the picture's pixels.
pub(crate) type TextBox = (String, f64, f64, f64, f64);

/// The boxes headless Chromium lays out the texts of the SVG file `svg` in, those that the CSS
/// `selector` picks (`text[fill="#d62728"]`), in document order: what a person sees where.
/// `None`, saying so, when Chromium is not installed.
///
/// # Panics
/// When Chromium runs but its page says nothing (the test fails, naming why).
pub(crate) fn text_boxes(svg: &Path, selector: &str, dir: &Path) -> Option<Vec<TextBox>> {
    let chromium = chromium()?;
    let picture = std::fs::read_to_string(svg).expect("the SVG reads");
    // Inline in a page whose script measures it and writes the boxes into the page, which
    // --dump-dom prints once the script has run.
    let body = picture
        .find("<svg")
        .map_or(picture.as_str(), |i| &picture[i..]);
    let stem = svg
        .file_stem()
        .map_or("page".into(), |s| s.to_string_lossy());
    let page = dir.join(format!("{stem}-boxes.html"));
    let script = format!(
        "<script>const out = [];\n\
         for (const t of document.querySelectorAll({selector:?})) {{\n\
           const b = t.getBBox();\n\
           out.push(['BOX', b.x, b.y, b.width, b.height, t.textContent.trim().replace(/\\s+/g, ' ')].join('\\t'));\n\
         }}\n\
         document.getElementById('boxes').textContent = out.join('\\n');</script>"
    );
    std::fs::write(
        &page,
        format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body style=\"margin:0\">\n{body}\n<pre id=\"boxes\"></pre>\n{script}</body></html>\n"
        ),
    )
    .expect("the page is written");
    let out = Command::new("timeout")
        .args(["-k", "5", "60", chromium])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--force-device-scale-factor=1",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("<pre id=\"boxes\">"),
        "no page from chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unescape = |t: &str| {
        t.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&nbsp;", "\u{a0}")
            .replace("&amp;", "&")
    };
    let boxes = dom
        .lines()
        .filter_map(|l| l.split_once("BOX\t").map(|(_, rest)| rest))
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, '\t').collect();
            let n = |i: usize| f.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
            let text = f.get(4).map_or(String::new(), |t| {
                unescape(t.split("</pre>").next().unwrap_or(t))
            });
            (text, n(0), n(1), n(2), n(3))
        })
        .collect();
    Some(boxes)
}
