//! The picture of a split flow, checked as a person would see it: headless Chromium renders
//! the SVG of an all-to-all cut into two groups, and the pixels must show every stage's box in
//! its group's colour where the layout put it, red (external) and purple (internal) channels
//! between the groups. Skipped, saying so, when Chromium is not installed.

use converse_flow::draw::{EXTERNAL, GROUP_FILLS, INTERNAL};
use converse_flow::{map, pipeline, source, AllToAll, Ctx, Flow, Groups, Source};
use std::sync::{Arc, Mutex};

#[path = "../../../tests/src/render.rs"]
mod render;
use render::{near, pixel, render};

struct One;

impl Source for One {
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        ctx.emit_u64(1);
        false
    }
}

#[test]
fn a_split_all_to_all_is_drawn_with_its_groups_and_crossing_channels() {
    let groups = Groups::parse(
        "group G1 pes 0\ngroup G2 pes 1\nplace G1 numbers L[0] R[0]\nplace G2 L[1] R[1] report\n",
    )
    .expect("groups");
    /// The SVG, the boxes' centres, the size, each stage's group.
    type Drawn = (String, Vec<(f64, f64)>, (f64, f64), Vec<Option<String>>);
    let got: Arc<Mutex<Option<Drawn>>> = Arc::default();
    let code = converse::Runtime::builder()
        .pes(2)
        .layer("local")
        .quiet(true)
        .build()
        .and_then(|rt| {
            rt.run(|pe| {
                let a2a = AllToAll::new(
                    2,
                    |_| map("L", |item, ctx| ctx.emit_item(item)),
                    2,
                    |_| map("R", |item, ctx| ctx.emit_item(item)),
                );
                let flow = Flow::new(pipeline([
                    source("numbers", || One),
                    a2a.into(),
                    map("report", |_, _| {}),
                ]))
                .groups(groups.clone());
                match flow.start(pe) {
                    Ok(plan) if pe.my_pe() == 0 => {
                        let (pos, size) = plan.layout();
                        let g = plan.stages().into_iter().map(|s| s.group).collect();
                        if let Ok(mut v) = got.lock() {
                            *v = Some((plan.to_svg(), pos, size, g));
                        }
                    }
                    Ok(_) => {}
                    Err(_) => pe.exit(2),
                }
            })
        });
    assert_eq!(code.ok(), Some(0));
    let Some((svg, pos, (w, h), groups)) = got.lock().ok().and_then(|mut v| v.take()) else {
        panic!("no picture");
    };
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let stages = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("stage"))
        .count();
    assert_eq!(stages, 6);
    let dir = std::env::temp_dir().join(format!("flow-pic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("a2a.svg");
    std::fs::write(&file, &svg).expect("write svg");
    let Some(img) = render(&file, w as u32, h as u32, &dir) else {
        return;
    };
    for (i, &(x, y)) in pos.iter().enumerate() {
        // Inside the box, left of its text.
        let want = match groups[i].as_deref() {
            Some("G1") => GROUP_FILLS[0],
            _ => GROUP_FILLS[1],
        };
        let p = pixel(&img, x - 58.0, y);
        assert!(
            near(p, want),
            "stage {i} at ({x},{y}): pixel {p:?}, want {want:?}"
        );
    }
    let count = |c: (u8, u8, u8)| {
        img.0
            .chunks(3)
            .filter(|p| near((p[0], p[1], p[2]), c))
            .count()
    };
    let (red, purple) = (count(EXTERNAL), count(INTERNAL));
    // numbers -> L[1] and R[0] -> report cross (external); L[0] -> R[1] and L[1] -> R[0]
    // (internal): dashed lines of 3 px, tens of pixels long each.
    assert!(red > 150, "only {red} red pixels");
    assert!(purple > 150, "only {purple} purple pixels");
    if std::env::var_os("FLOW_KEEP_PICTURES").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        eprintln!("picture kept in {}", dir.display());
    }
}
