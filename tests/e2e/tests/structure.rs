//! The code map's rules, checked on the sources (ARCHITECTURE.md): the three crates depend on
//! each other in one direction only and each keeps out what its Architecture Invariant keeps out;
//! no import cycle between the modules of a crate; no source file over the size bound.
//!
//! Modules are compared at the level where two paths part: `crate::a::b` used from `crate::a::c`
//! is an edge `a::c → a::b`; `crate::x` used from `crate::a::c` is an edge `a → x`. Paths are read
//! from `use` declarations and inline paths (`crate::…`, `super::…`), outside comments and outside
//! test modules (a `#[cfg(test)]` block to the end of the file, and files named `tests.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_e2e::repo_root;

/// The most lines a source file may have before its test module.
const MAX_LINES: usize = 700;

/// The source folders of the crates (crate name, folder): the three product crates and the test
/// crates' libraries (the fake NVML library, the end-to-end helpers).
const CRATES: &[(&str, &str)] = &[
    ("core", "core/src"),
    ("exporter", "exporter/src"),
    ("analyzer", "analyzer/src"),
    ("fake-nvml", "tests/fake-nvml/src"),
    ("fake-nvml-recorded", "tests/fake-nvml-recorded/src"),
    ("e2e", "tests/e2e/src"),
    ("fake-kube", "tests/fake-kube/src"),
    ("fake-kubelet", "tests/fake-kubelet/src"),
];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Lines of `text` before its inline test module (`#[cfg(test)]` followed by `mod … {`); a
/// `#[cfg(test)] mod tests;` naming a file of its own ends nothing (its lines count on).
fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .position(|(i, l)| {
            l.starts_with("#[cfg(test)]")
                && lines.get(i + 1).is_some_and(|next| {
                    let next = next.trim();
                    next.starts_with("mod ") && next.contains('{')
                })
        })
        .unwrap_or(lines.len())
}

/// The file's text before its test module, without comments.
fn product_code(text: &str) -> String {
    let end = lines_before_tests(text);
    text.lines()
        .take(end)
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module path of a source file relative to its crate's `src/`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The module paths written at `text[at..]` after a `crate::` or `super::`: the lower-case
/// segments of `a::b::C` (`["a", "b"]`, types end it), and one path per entry of a `{a, b::c}`
/// list.
fn paths_at(text: &str, at: usize) -> Vec<Vec<String>> {
    let is_seg = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let mut segs = Vec::new();
    let mut rest = &text[at..];
    loop {
        if let Some(inner) = rest.strip_prefix('{') {
            // Entries of the list at depth 1.
            let mut depth = 1;
            let mut out = Vec::new();
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {}
                    _ => continue,
                }
                if depth == 0 || (c == ',' && depth == 1) {
                    let entry = inner[start..i].trim_start();
                    for tail in paths_at(entry, 0) {
                        let mut p = segs.clone();
                        p.extend(tail);
                        out.push(p);
                    }
                    start = i + 1;
                }
                if depth == 0 {
                    break;
                }
            }
            return out;
        }
        let seg: String = rest.chars().take_while(|c| is_seg(*c)).collect();
        if seg.is_empty() || seg == "self" {
            break;
        }
        rest = &rest[seg.len()..];
        segs.push(seg);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    vec![segs]
}

/// Edges between sibling modules of one crate, from the modules' `crate::` and `super::` paths.
fn module_edges(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in rust_files(src) {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let from = module_of(src, &file);
        let code = product_code(&std::fs::read_to_string(&file).unwrap());
        let mut targets = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            targets.extend(paths_at(&code, i + "crate::".len()));
        }
        for (i, _) in code.match_indices("super::") {
            if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // `super` of `a/b.rs` and of `a/b/mod.rs` (both module `a::b`) is `a`.
            let mut base = from.clone();
            base.pop();
            let mut rest = &code[i + "super::".len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            for tail in paths_at(rest, 0) {
                let mut p = base.clone();
                p.extend(tail);
                targets.push(p);
            }
        }
        for to in targets {
            let k = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if k < from.len() && k < to.len() {
                let a = from[..=k].to_vec();
                let b = to[..=k].to_vec();
                if a != b {
                    edges.entry(a).or_default().insert(b);
                }
            }
        }
    }
    edges
}

/// Cycles of a graph (Tarjan's strongly connected components with more than one node).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Vec<String>) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        if let Some(ws) = t.edges.get(v) {
            for w in ws {
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let l = t.low[w].min(t.low[v]);
                    t.low.insert(v, l);
                } else if t.stack.contains(&w) {
                    let l = t.index[w].min(t.low[v]);
                    t.low.insert(v, l);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                comp.push(w.join("::"));
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let root = repo_root();
    let mut found = Vec::new();
    for (name, dir) in CRATES {
        for c in cycles(&module_edges(&root.join(dir))) {
            found.push(format!("{name}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_planted_cycle() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir_all(src.join("history")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod history;\n").unwrap();
    std::fs::write(
        src.join("history/mod.rs"),
        "pub mod reader;\npub mod writer;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("history/reader.rs"),
        "use super::writer::HistoryError;\n// use super::nothing;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("history/writer.rs"),
        "pub fn f() { crate::history::reader::read(); }\n#[cfg(test)]\nmod tests { use crate::sim; }\n",
    )
    .unwrap();
    let edges = module_edges(src);
    assert_eq!(
        cycles(&edges),
        vec![vec![
            "history::reader".to_string(),
            "history::writer".into()
        ]]
    );
    // The test module's and the comment's paths are not edges.
    assert!(edges.keys().all(|k| k.len() == 2), "{edges:?}");
}

#[test]
fn no_source_file_is_over_the_bound_before_its_tests() {
    let root = repo_root();
    let mut over = Vec::new();
    for (_, dir) in CRATES {
        for file in rust_files(&root.join(dir)) {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let n = lines_before_tests(&std::fs::read_to_string(&file).unwrap());
            if n > MAX_LINES {
                over.push(format!(
                    "{}: {n} lines",
                    file.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        over.is_empty(),
        "files over {MAX_LINES} lines (not counting the test module):\n{}",
        over.join("\n")
    );
}

#[test]
fn a_test_module_in_its_own_file_does_not_end_the_count() {
    let body = "fn f() {}\n".repeat(5);
    assert_eq!(
        lines_before_tests(&format!("#[cfg(test)]\nmod tests;\n{body}")),
        7
    );
    assert_eq!(
        lines_before_tests(&format!("{body}#[cfg(test)]\nmod tests {{\n}}\n")),
        5
    );
    assert_eq!(lines_before_tests(&body), 5);
}

/// The packages `cargo tree` lists for `package`'s normal (non-dev) dependencies.
fn dependency_tree(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(repo_root())
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn has(tree: &str, name: &str) -> bool {
    tree.lines().any(|l| l.split(' ').next() == Some(name))
}

#[test]
fn each_crate_keeps_out_what_its_invariant_keeps_out() {
    let core = dependency_tree("tessera-core");
    for banned in [
        "tokio",
        "hyper",
        "rustls",
        "polars",
        "prometheus-client",
        "bcrypt",
        "tessera-exporter",
        "tessera",
    ] {
        assert!(!has(&core, banned), "tessera-core depends on {banned}");
    }
    assert!(
        has(&core, "tessera-core") && has(&core, "parquet"),
        "{core}"
    );

    let exporter = dependency_tree("tessera-exporter");
    for banned in ["polars", "tessera"] {
        assert!(
            !has(&exporter, banned),
            "tessera-exporter depends on {banned}"
        );
    }
    assert!(has(&exporter, "tessera-core"), "{exporter}");

    // The analyzer: the web stack stays in the exporter (polars' own dependencies may bring an
    // HTTP client; bcrypt and prometheus-client it does not).
    let analyzer = dependency_tree("tessera");
    for banned in ["tessera-exporter", "bcrypt", "prometheus-client"] {
        assert!(!has(&analyzer, banned), "tessera depends on {banned}");
    }
    assert!(
        has(&analyzer, "tessera-core") && has(&analyzer, "polars"),
        "{analyzer}"
    );
}

/// The modules commands may share: `cli::source` (what the commands that read telemetry share),
/// and within the `mig` family its device flags (`backend`) and `apply`'s `via_manager`.
const SHARED_BY_COMMANDS: &[&str] = &["cli::source", "cli::mig::backend", "cli::mig::via_manager"];

/// Imports between commands (children of `cli`) or between `mig` verbs (children of
/// `cli::mig`) other than of a shared module: "commands never import each other".
fn command_imports(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in edges {
        for to in tos {
            let scope = &from[..from.len() - 1];
            let is_commands = scope == ["cli"] || scope == ["cli", "mig"];
            if is_commands
                && to.starts_with(scope)
                && !SHARED_BY_COMMANDS.contains(&to.join("::").as_str())
            {
                out.push(format!("{} uses {}", from.join("::"), to.join("::")));
            }
        }
    }
    out
}

#[test]
fn commands_never_import_each_other() {
    let found = command_imports(&module_edges(&repo_root().join("analyzer/src")));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_command_check_finds_a_planted_import() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir_all(src.join("cli/mig")).unwrap();
    std::fs::write(src.join("main.rs"), "mod cli;\n").unwrap();
    std::fs::write(
        src.join("cli/mod.rs"),
        "pub mod report;\npub mod analyze;\npub mod source;\npub mod mig;\n",
    )
    .unwrap();
    std::fs::write(src.join("cli/analyze.rs"), "use super::source::Args;\n").unwrap();
    std::fs::write(
        src.join("cli/report.rs"),
        "use super::analyze::AnalyzeArgs;\n",
    )
    .unwrap();
    std::fs::write(src.join("cli/source.rs"), "pub struct Args;\n").unwrap();
    std::fs::write(
        src.join("cli/mig/mod.rs"),
        "mod apply;\nmod export;\nmod backend;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("cli/mig/apply.rs"),
        "use super::backend::open;\nuse super::export::ExportArgs;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("cli/mig/export.rs"),
        "use crate::cli::source::Args;\n",
    )
    .unwrap();
    std::fs::write(src.join("cli/mig/backend.rs"), "pub fn open() {}\n").unwrap();
    assert_eq!(
        command_imports(&module_edges(src)),
        vec![
            "cli::mig::apply uses cli::mig::export".to_string(),
            "cli::report uses cli::analyze".to_string(),
        ]
    );
}

/// Files of the product crates that name `anyhow` outside command glue (`cli/`, `main.rs`):
/// library modules return `thiserror` errors.
fn anyhow_outside_glue(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["core/src", "exporter/src", "analyzer/src"] {
        let src = root.join(dir);
        for file in rust_files(&src) {
            let rel = file.strip_prefix(&src).unwrap();
            let glue = rel.starts_with("cli") || rel == Path::new("main.rs");
            let code = product_code(&std::fs::read_to_string(&file).unwrap());
            if !glue && code.contains("anyhow") {
                out.push(format!("{dir}/{}", rel.display()));
            }
        }
    }
    out
}

#[test]
fn anyhow_is_only_in_command_glue() {
    let found = anyhow_outside_glue(&repo_root());
    assert!(
        found.is_empty(),
        "anyhow outside cli/ and main.rs:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_anyhow_check_finds_a_planted_use() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in [
        ("analyzer/src/cli/report.rs", "use anyhow::Result;\n"),
        (
            "analyzer/src/main.rs",
            "fn main() -> anyhow::Result<()> { Ok(()) }\n",
        ),
        (
            "analyzer/src/report/mod.rs",
            "pub fn f() -> anyhow::Result<()> { Ok(()) }\n",
        ),
        (
            "core/src/lib.rs",
            "//! no errors here\n#[cfg(test)]\nmod tests { use anyhow::Result; }\n",
        ),
        ("exporter/src/lib.rs", "pub mod x;\n"),
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        anyhow_outside_glue(tmp.path()),
        vec!["analyzer/src/report/mod.rs".to_string()]
    );
}

/// Files of the product crates outside `core/src/nvml/` whose code names an NVML type: the
/// nvml-wrapper crates, `NvmlBackend`, or any type of `tessera_core::nvml` (`nvml::Foo`). The
/// backend spec opens NVML through `nvml::open_*` functions; the fake libraries under `tests/`
/// are not product crates.
fn nvml_names_outside_nvml(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["core/src", "exporter/src", "analyzer/src"] {
        let src = root.join(dir);
        for file in rust_files(&src) {
            let rel = file.strip_prefix(&src).unwrap();
            if dir == "core/src" && rel.starts_with("nvml") {
                continue;
            }
            let code = product_code(&std::fs::read_to_string(&file).unwrap());
            let names_type = code.match_indices("nvml::").any(|(i, _)| {
                code[i + "nvml::".len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
            });
            if names_type || code.contains("nvml_wrapper") || code.contains("NvmlBackend") {
                out.push(format!("{dir}/{}", rel.display()));
            }
        }
    }
    out
}

#[test]
fn only_core_nvml_names_nvml_types() {
    let found = nvml_names_outside_nvml(&repo_root());
    assert!(
        found.is_empty(),
        "NVML types named outside core/src/nvml/:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_nvml_check_finds_a_planted_name() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in [
        (
            "core/src/nvml/mod.rs",
            "use nvml_wrapper::Nvml;\npub struct NvmlBackend;\n",
        ),
        (
            "core/src/backend.rs",
            "// NvmlBackend in a comment is fine\npub fn f() { crate::nvml::open_reader(None); }\n",
        ),
        (
            "analyzer/src/cli/mig/profiles.rs",
            "use tessera_core::nvml::NvmlBackend;\n",
        ),
        (
            "exporter/src/main.rs",
            "fn f(e: nvml_wrapper::error::NvmlError) {}\n",
        ),
        (
            "core/src/sim/mod.rs",
            "use crate::nvml::GpuInstanceProfile;\n",
        ),
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        nvml_names_outside_nvml(tmp.path()),
        vec![
            "core/src/sim/mod.rs".to_string(),
            "exporter/src/main.rs".to_string(),
            "analyzer/src/cli/mig/profiles.rs".to_string(),
        ]
    );
}

/// What the code map of `architecture` (ARCHITECTURE.md's text) misses or names wrongly: every
/// top-level folder and module file of the three product crates' `src/` (besides `lib.rs`) is
/// named in its crate's section as `` `name/` `` or `` `name.rs` ``, and every folder a section
/// names that way exists.
fn code_map_mismatches(root: &Path, architecture: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (krate, heading) in [
        ("core", "### `core/`"),
        ("exporter", "### `exporter/`"),
        ("analyzer", "### `analyzer/`"),
    ] {
        let Some(start) = architecture.find(heading) else {
            out.push(format!("no section {heading}"));
            continue;
        };
        let rest = &architecture[start + heading.len()..];
        let section = &rest[..rest.find("\n### ").unwrap_or(rest.len())];
        let src = root.join(krate).join("src");
        let mut entries: Vec<_> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let named = if path.is_dir() {
                format!("`{name}/`")
            } else if name.ends_with(".rs") && name != "lib.rs" {
                format!("`{name}`")
            } else {
                continue;
            };
            if !section.contains(&format!("- {named}")) {
                out.push(format!("{krate}/src: {named} is not in the code map"));
            }
        }
        for line in section.lines() {
            let Some(item) = line.strip_prefix("- `") else {
                continue;
            };
            let Some(end) = item.find('`') else { continue };
            let name = &item[..end];
            if name.ends_with('/') && !src.join(name).is_dir() {
                out.push(format!(
                    "{krate}/src: the code map names `{name}`, which is not there"
                ));
            }
        }
    }
    out
}

#[test]
fn the_code_map_names_every_top_level_folder_and_module() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let found = code_map_mismatches(&root, &text);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_code_map_check_finds_a_missing_and_a_stale_entry() {
    let tmp = tempfile::tempdir().unwrap();
    for path in [
        "core/src/lib.rs",
        "core/src/device.rs",
        "core/src/nvml/mod.rs",
        "exporter/src/main.rs",
        "analyzer/src/cli/mod.rs",
        "analyzer/src/frames/mod.rs",
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }
    let map = "### `core/` — x\n\n- `device.rs` — d\n- `nvml/` — n\n\n\
               ### `exporter/` — y\n\n- `main.rs` — m\n- `web/` — gone\n\n\
               ### `analyzer/` — z\n\n- `cli/` — c\n";
    assert_eq!(
        code_map_mismatches(tmp.path(), map),
        vec![
            "exporter/src: the code map names `web/`, which is not there".to_string(),
            "analyzer/src: `frames/` is not in the code map".to_string(),
        ]
    );
}

/// What constructs a kube-rs client or declares the cluster connection flags: only the one
/// Kubernetes module of the analyzer may (`analyzer/src/kubernetes/`).
const KUBE_CONSTRUCTION: [&str; 9] = [
    "Client::try_from",
    "Client::try_default",
    "Config::infer",
    "Config::from_kubeconfig",
    "Config::from_custom_kubeconfig",
    "Config::incluster",
    "kube::config::",
    "Kubeconfig::read",
    "long = \"request-timeout\"",
];

/// Files of the product crates outside `analyzer/src/kubernetes/` whose code constructs a
/// kube-rs client, reads a kubeconfig or declares `--request-timeout`.
fn kube_clients_outside_kubernetes(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["core/src", "exporter/src", "analyzer/src"] {
        let src = root.join(dir);
        for file in rust_files(&src) {
            let rel = file.strip_prefix(&src).unwrap();
            if dir == "analyzer/src" && rel.starts_with("kubernetes") {
                continue;
            }
            let code = product_code(&std::fs::read_to_string(&file).unwrap());
            let kubeconfig_flag = code.contains("kubeconfig: Option<");
            if kubeconfig_flag || KUBE_CONSTRUCTION.iter().any(|p| code.contains(p)) {
                out.push(format!("{dir}/{}", rel.display()));
            }
        }
    }
    out
}

#[test]
fn only_the_kubernetes_module_constructs_kube_clients() {
    let found = kube_clients_outside_kubernetes(&repo_root());
    assert!(
        found.is_empty(),
        "kube-rs clients or cluster connection flags outside analyzer/src/kubernetes/:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_kube_client_check_finds_a_planted_construction() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in [
        (
            "analyzer/src/kubernetes/client.rs",
            "fn c() { let _ = kube::Client::try_from(cfg); }\n",
        ),
        (
            "analyzer/src/sharing/kube.rs",
            "fn c() { let _ = kube::Config::infer(); }\n",
        ),
        (
            "analyzer/src/cli/share.rs",
            "struct A { kubeconfig: Option<PathBuf> }\n",
        ),
        (
            "analyzer/src/scale_down/kube.rs",
            "//! uses crate::kubernetes::Kube\n#[cfg(test)]\nmod tests { fn t() { kube::Client::try_default(); } }\n",
        ),
        ("core/src/lib.rs", "pub mod x;\n"),
        ("exporter/src/lib.rs", "pub mod x;\n"),
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        kube_clients_outside_kubernetes(tmp.path()),
        vec![
            "analyzer/src/cli/share.rs".to_string(),
            "analyzer/src/sharing/kube.rs".to_string(),
        ]
    );
}

/// Files of the product crates, but their `main.rs`, whose code calls `process::exit`: the exit
/// code belongs to `main`, which runs the cleanup (the `prometheus:` spill folders) first.
fn exits_outside_main(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["core/src", "exporter/src", "analyzer/src"] {
        let src = root.join(dir);
        for file in rust_files(&src) {
            let rel = file.strip_prefix(&src).unwrap();
            if rel == Path::new("main.rs") {
                continue;
            }
            let code = product_code(&std::fs::read_to_string(&file).unwrap());
            if code.contains("process::exit") {
                out.push(format!("{dir}/{}", rel.display()));
            }
        }
    }
    out
}

#[test]
fn only_main_exits_the_process() {
    let found = exits_outside_main(&repo_root());
    assert!(
        found.is_empty(),
        "process::exit outside main.rs:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_exit_check_finds_a_planted_exit() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in [
        (
            "analyzer/src/main.rs",
            "fn main() { std::process::exit(2) }\n",
        ),
        (
            "analyzer/src/cli/notify.rs",
            "pub fn run() { std::process::exit(3); }\n",
        ),
        (
            "exporter/src/web.rs",
            "#[cfg(test)]\nmod tests { fn t() { std::process::exit(1) } }\n",
        ),
        ("core/src/lib.rs", "pub mod x;\n"),
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        exits_outside_main(tmp.path()),
        vec!["analyzer/src/cli/notify.rs".to_string()]
    );
}

/// Files of the analyzer outside the sources (`ingest/`), the commands (`cli/`, `main.rs`) and
/// the report (whose model carries the sources' ingest report) whose code names `ingest`: the
/// time vocabulary is `crate::times`, so nothing else needs the 11k-line source layer.
fn ingest_outside_sources(root: &Path) -> Vec<String> {
    let src = root.join("analyzer/src");
    let mut out = Vec::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap();
        if rel.starts_with("ingest")
            || rel.starts_with("cli")
            || rel.starts_with("report")
            || rel == Path::new("main.rs")
            || rel == Path::new("lib.rs")
        {
            continue;
        }
        let code = product_code(&std::fs::read_to_string(&file).unwrap());
        if code.contains("crate::ingest") || code.contains("ingest::") {
            out.push(format!("analyzer/src/{}", rel.display()));
        }
    }
    out
}

#[test]
fn only_sources_commands_and_the_report_use_ingest() {
    let found = ingest_outside_sources(&repo_root());
    assert!(
        found.is_empty(),
        "ingest used outside the sources and the commands (the time vocabulary is crate::times):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_ingest_check_finds_a_planted_use() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in [
        ("analyzer/src/ingest/mod.rs", "pub fn fmt_ms() {}\n"),
        (
            "analyzer/src/cli/report.rs",
            "use tessera::ingest::Source;\n",
        ),
        ("analyzer/src/jobs/mod.rs", "use crate::ingest::fmt_ms;\n"),
        (
            "analyzer/src/advisor/mod.rs",
            "/// Like `ingest::ingest_parts`\npub fn f() {}\n",
        ),
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        ingest_outside_sources(tmp.path()),
        vec!["analyzer/src/jobs/mod.rs".to_string()]
    );
}

/// Functions of [`LONG_FUNCTION_LINES`] lines or more in the product crates' code (test modules
/// and comments left out): `file:line name (lines)`. A function starts at a line whose code begins
/// with `fn`, `pub fn`, `pub(crate) fn`, … and ends where the braces its body opened close (braces
/// in string and char literals are skipped).
fn long_functions(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["core/src", "exporter/src", "analyzer/src"] {
        let src = root.join(dir);
        for file in rust_files(&src) {
            let code = product_code(&std::fs::read_to_string(&file).unwrap());
            let lines: Vec<&str> = code.lines().collect();
            let mut i = 0;
            while i < lines.len() {
                let t = lines[i].trim_start();
                let t = t
                    .strip_prefix("pub(crate) ")
                    .or_else(|| t.strip_prefix("pub(super) "))
                    .or_else(|| t.strip_prefix("pub "))
                    .unwrap_or(t);
                let t = t.strip_prefix("const ").unwrap_or(t);
                let t = t.strip_prefix("async ").unwrap_or(t);
                let t = t.strip_prefix("unsafe ").unwrap_or(t);
                let t = t.strip_prefix("extern \"C\" ").unwrap_or(t);
                let Some(rest) = t.strip_prefix("fn ") else {
                    i += 1;
                    continue;
                };
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                // Count braces from the signature on until the body closes.
                let (mut depth, mut opened, mut j) = (0i64, false, i);
                'scan: while j < lines.len() {
                    let mut in_str = false;
                    let mut prev = ' ';
                    for c in lines[j].chars() {
                        match c {
                            '"' if prev != '\\' => in_str = !in_str,
                            '{' if !in_str && prev != '\'' => {
                                depth += 1;
                                opened = true;
                            }
                            '}' if !in_str && prev != '\'' => depth -= 1,
                            ';' if !in_str && !opened && depth == 0 => break 'scan,
                            _ => {}
                        }
                        prev = if prev == '\\' && c == '\\' { ' ' } else { c };
                    }
                    if opened && depth <= 0 {
                        break;
                    }
                    j += 1;
                }
                let n = j.saturating_sub(i) + 1;
                if opened && n >= LONG_FUNCTION_LINES {
                    out.push(format!(
                        "{}:{} {name} ({n})",
                        file.strip_prefix(root).unwrap().display(),
                        i + 1
                    ));
                }
                i = j.max(i) + 1;
            }
        }
    }
    out
}

/// A function this long has steps that deserve names.
const LONG_FUNCTION_LINES: usize = 100;
/// The most functions of [`LONG_FUNCTION_LINES`] lines or more the product code may have: the
/// count on 2026-11-29, lowered as functions are split (the target is 40; ARCHITECTURE.md,
/// "Tests"). A new long function must come with the split of another.
const MAX_LONG_FUNCTIONS: usize = 16;

#[test]
fn long_functions_do_not_grow_past_the_limit() {
    let found = long_functions(&repo_root());
    assert!(
        found.len() <= MAX_LONG_FUNCTIONS,
        "{} functions of {LONG_FUNCTION_LINES}+ lines, more than the limit {MAX_LONG_FUNCTIONS}: split one (its steps named) or, having split others, lower the limit:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_long_function_count_finds_a_planted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let long = format!(
        "pub fn long() {{\n{}}}\nfn short() {{ let s = \"{{\"; }}\npub(crate) fn also() -> u8 {{\n    0\n}}\n#[cfg(test)]\nmod tests {{\n    fn test_long() {{\n{}    }}\n}}\n",
        "    let x = '}';\n".repeat(120),
        "        x();\n".repeat(150)
    );
    for (path, text) in [
        ("analyzer/src/lib.rs", long.as_str()),
        ("core/src/lib.rs", "pub fn f();\n"),
        ("exporter/src/lib.rs", "pub mod x;\n"),
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        long_functions(tmp.path()),
        vec!["analyzer/src/lib.rs:1 long (122)".to_string()]
    );
}

/// Whether `code` pads a formatted value to a width (`{:<8}`, `{name:>w$}`, `{:^3}`): a table
/// laid out by hand.
fn pads_to_a_width(code: &str) -> bool {
    let b = code.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        if c != b'{' {
            return false;
        }
        let mut j = i + 1;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'.') {
            j += 1;
        }
        if b.get(j) != Some(&b':') {
            return false;
        }
        // An optional fill character, then the alignment, then a width or a `name$`.
        let at = |k: usize| b.get(k).copied().unwrap_or(0);
        let align = |k: usize| matches!(at(k), b'<' | b'>' | b'^');
        let k = if align(j + 1) {
            j + 2
        } else if align(j + 2) {
            j + 3
        } else {
            return false;
        };
        at(k).is_ascii_digit() || at(k).is_ascii_alphabetic()
    })
}

/// Files of the analyzer outside the output layer (`output/`) whose code builds a table
/// (`tabled`, a width-padded column) or an HTML page shell (`<!DOCTYPE`): only the output layer
/// lays out, so it escapes every cell and a page has one shell.
fn output_outside_layer(root: &Path) -> Vec<String> {
    let src = root.join("analyzer/src");
    let mut out = Vec::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap();
        if rel.starts_with("output") || rel.ends_with("tests.rs") {
            continue;
        }
        let code = product_code(&std::fs::read_to_string(&file).unwrap());
        let why = if code.contains("tabled") {
            "tabled"
        } else if code.contains("<!DOCTYPE") {
            "an HTML page shell"
        } else if pads_to_a_width(&code) {
            "a width-padded column"
        } else {
            continue;
        };
        out.push(format!("analyzer/src/{}: {why}", rel.display()));
    }
    out
}

#[test]
fn only_the_output_layer_builds_tables_and_pages() {
    let found = output_outside_layer(&repo_root());
    assert!(
        found.is_empty(),
        "tables or HTML page shells outside analyzer/src/output/ (use output::Table, output::html):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_output_check_finds_planted_tables_and_pages() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in [
        (
            "analyzer/src/output/table.rs",
            "use tabled::builder::Builder;\nfn f(c: &str, w: usize) -> String { format!(\"{c:<w$}\") }\n",
        ),
        (
            "analyzer/src/jobs/render.rs",
            "fn f() -> String { format!(\"  {:<16} {:>3}\", \"a\", 1) }\n",
        ),
        (
            "analyzer/src/replay/render.rs",
            "fn f(c: &str, w: usize) -> String { format!(\"{c:<w$}\") }\n",
        ),
        (
            "analyzer/src/report/html.rs",
            "const P: &str = \"<!DOCTYPE html>\";\n",
        ),
        ("analyzer/src/report/render.rs", "use tabled::Table;\n"),
        (
            "analyzer/src/cli/job.rs",
            "// {:<8} in a comment, {:.1} a precision, {x:?} and {{:<}} are fine\nfn f(x: f64) -> String { format!(\"{x:.1} {x:?} {:02}\", 3) }\n#[cfg(test)]\nmod tests { fn t() -> String { format!(\"{:>9}\", 1) } }\n",
        ),
    ] {
        let p = tmp.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    assert_eq!(
        output_outside_layer(tmp.path()),
        vec![
            "analyzer/src/jobs/render.rs: a width-padded column".to_string(),
            "analyzer/src/replay/render.rs: a width-padded column".to_string(),
            "analyzer/src/report/html.rs: an HTML page shell".to_string(),
            "analyzer/src/report/render.rs: tabled".to_string(),
        ]
    );
}
