//! A segment trie of path templates.
//!
//! Each node has literal children (keyed by lower-case text), parameter children (one
//! per distinct constraint set) and two candidate lists, both sorted by rank: routes
//! whose template ends at the node, and routes with a catch-all starting there. Every
//! node also knows the best rank anywhere below it, so a search skips subtrees that
//! cannot beat the best match found so far (branch and bound).

use crate::fxhash::FxHashMap;

use super::constraint::Constraint;
use super::path::RequestPath;
use super::template::Segment;

/// One route reachable at a node, through one of its host patterns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// Global precedence rank: lower wins.
    pub(super) rank: u32,
    /// Index of the route.
    pub(super) route: u32,
    /// The port the host pattern requires, if any.
    pub(super) port: Option<u16>,
}

/// The best match found so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct Best {
    rank: u32,
    route: u32,
}

impl Best {
    /// Nothing found yet.
    pub(super) const NONE: Best = Best {
        rank: u32::MAX,
        route: u32::MAX,
    };

    /// The route found, if any.
    pub(super) fn route(self) -> Option<usize> {
        (self.rank != u32::MAX).then_some(self.route as usize)
    }
}

/// A trie node (the root stands for `/`).
#[derive(Debug)]
pub(super) struct Node {
    literals: FxHashMap<Box<[u8]>, Node>,
    params: Vec<(Box<[Constraint]>, Node)>,
    terminal: Vec<Entry>,
    catch_all: Vec<Entry>,
    /// Lowest rank in this subtree; `u32::MAX` when empty.
    min_rank: u32,
}

impl Default for Node {
    fn default() -> Self {
        Node {
            literals: FxHashMap::default(),
            params: Vec::new(),
            terminal: Vec::new(),
            catch_all: Vec::new(),
            min_rank: u32::MAX,
        }
    }
}

impl Node {
    /// Add a route's template below this node.
    pub(super) fn insert(&mut self, segments: &[Segment], entry: Entry) {
        let Some((first, rest)) = segments.split_first() else {
            self.terminal.push(entry);
            return;
        };
        match first {
            Segment::CatchAll { .. } => self.catch_all.push(entry),
            Segment::Literal(text) => self
                .literals
                .entry(text.clone())
                .or_default()
                .insert(rest, entry),
            Segment::Param {
                constraints,
                optional,
                ..
            } => {
                if *optional {
                    // Leaving this segment out leaves out the optional ones after it
                    // too (templates only allow optionals and a catch-all after one).
                    let skip = rest
                        .iter()
                        .position(|s| !matches!(s, Segment::Param { optional: true, .. }))
                        .unwrap_or(rest.len());
                    self.insert(&rest[skip..], entry);
                }
                self.param_child(constraints).insert(rest, entry);
            }
        }
    }

    fn param_child(&mut self, constraints: &[Constraint]) -> &mut Node {
        let i = match self.params.iter().position(|(c, _)| **c == *constraints) {
            Some(i) => i,
            None => {
                self.params.push((constraints.into(), Node::default()));
                self.params.len() - 1
            }
        };
        &mut self.params[i].1
    }

    /// Sort candidate lists by rank and compute subtree minima; call once after the
    /// last insert. Returns this node's minimum.
    pub(super) fn finish(&mut self) -> u32 {
        self.terminal.sort_by_key(|e| e.rank);
        self.catch_all.sort_by_key(|e| e.rank);
        let mut min = [&self.terminal, &self.catch_all]
            .iter()
            .filter_map(|list| list.first().map(|e| e.rank))
            .min()
            .unwrap_or(u32::MAX);
        for child in self.literals.values_mut() {
            min = min.min(child.finish());
        }
        for (_, child) in &mut self.params {
            min = min.min(child.finish());
        }
        // Most promising parameter branch first, so later ones are pruned sooner.
        self.params.sort_by_key(|(_, child)| child.min_rank);
        self.literals.shrink_to_fit();
        self.min_rank = min;
        min
    }

    /// Find the best entry matching `path[depth..]` below this node that `accept`s,
    /// improving on `best`.
    pub(super) fn search<F>(&self, path: &RequestPath, depth: usize, accept: &F, best: &mut Best)
    where
        F: Fn(&Entry) -> bool,
    {
        if self.min_rank >= best.rank {
            return;
        }
        if depth == path.len() {
            scan(&self.terminal, accept, best);
        } else {
            let segment = path.segment(depth);
            if !self.literals.is_empty() {
                if let Some(child) = self.literals.get(segment) {
                    child.search(path, depth + 1, accept, best);
                }
            }
            for (constraints, child) in &self.params {
                if child.min_rank < best.rank && constraints.iter().all(|c| c.accepts(segment)) {
                    child.search(path, depth + 1, accept, best);
                }
            }
        }
        scan(&self.catch_all, accept, best);
    }
}

/// Take the first (best-ranked) entry that beats `best` and is accepted.
fn scan<F: Fn(&Entry) -> bool>(entries: &[Entry], accept: &F, best: &mut Best) {
    for entry in entries {
        if entry.rank >= best.rank {
            return;
        }
        if accept(entry) {
            *best = Best {
                rank: entry.rank,
                route: entry.route,
            };
            return;
        }
    }
}
