(function () {
  'use strict';
  var cv = document.getElementById('zoom-canvas');
  var D = JSON.parse(document.getElementById('zoom-data').textContent);
  var ds = cv.dataset;
  var L = +ds.left, W = +ds.plotW, TOP = +ds.axisH, RH = +ds.rowH, EH = +ds.eventH;
  var BT = +ds.bandTop, BH = +ds.bandH, KT = +ds.bracketTop, KH = +ds.bracketH;
  var MINB = +ds.minBar;
  var END = Math.max(1, D.end);
  var NC = D.pal.length;
  var info = document.getElementById('zoom-info');
  var label = document.getElementById('zoom-window');
  var ctx = cv.getContext('2d');
  var rgb = function (c) { return 'rgb(' + c.join(',') + ')'; };

  // Each list is flat, its items' numbers one after another: the start (the difference
  // from the previous item's), the length when `long`, a name index when `named`.
  function decode(a, long, named) {
    var n = 1 + long + named, m = Math.floor(a.length / n), t = 0;
    var s = new Float64Array(m), e = new Float64Array(m), k = new Int32Array(m);
    for (var j = 0; j < m; j++) {
      t += a[j * n];
      s[j] = t;
      e[j] = long ? t + a[j * n + 1] : t;
      if (named) k[j] = a[j * n + n - 1];
    }
    return { s: s, e: e, k: k, n: m };
  }
  var rows = D.rows.map(function (r) {
    return { label: r.label, s: decode(r.s, 1, 1), i: decode(r.i, 1, 0), k: decode(r.k, 1, 0),
             b: decode(r.b, 1, 1), e: decode(r.e, 0, 1), cut: r.cut };
  });
  var styles = D.pal.map(rgb), idleStyle = rgb(D.idle), bootStyle = rgb(D.boot);

  var t0 = 0, t1 = END;
  var busy = new Float64Array(W * NC), idle = new Float64Array(W), boot = new Float64Array(W);

  // The first item of a list (sorted by start) that may reach past `t`.
  function first(l, t) {
    var lo = 0, hi = l.n;
    while (lo < hi) { var m = (lo + hi) >> 1; if (l.s[m] < t) lo = m + 1; else hi = m; }
    return Math.max(0, lo - 1);
  }
  // Spread each item's time in [t0, t1] over the pixel columns; an item of no length still
  // counts a little, so that it shows.
  function spread(l, per, add) {
    for (var j = first(l, t0); j < l.n && l.s[j] < t1; j++) {
      var a = Math.max(l.s[j], t0), b = Math.min(l.e[j], t1);
      if (b < a) continue;
      var c0 = Math.min(W - 1, Math.floor((a - t0) / per));
      var c1 = Math.min(W - 1, Math.floor((b - t0) / per));
      for (var c = c0; c <= c1; c++) {
        var d = Math.min(b, t0 + (c + 1) * per) - Math.max(a, t0 + c * per);
        add(c, Math.max(d, per * 1e-6), j);
      }
    }
  }

  function unit(step) {
    return step >= 1e9 ? [1e9, 's'] : step >= 1e6 ? [1e6, 'ms']
      : step >= 1e3 ? [1e3, 'µs'] : [1, 'ns'];
  }
  function fmt(ns) {
    var u = unit(Math.abs(ns) || 1);
    return (ns / u[0]).toFixed(u[0] === 1 ? 0 : 3) + ' ' + u[1];
  }

  function draw() {
    var per = (t1 - t0) / W;
    ctx.fillStyle = 'white';
    ctx.fillRect(0, 0, cv.width, cv.height);
    ctx.font = '11px sans-serif';
    // The axis: a round step giving about eight ticks, in the unit of the step.
    var raw = (t1 - t0) / 8, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (f) { return f * p; })
      .filter(function (s) { return s >= raw; })[0];
    var u = unit(step), digits = Math.max(0, Math.ceil(-Math.log10(step / u[0]) - 1e-9));
    ctx.fillStyle = 'black';
    ctx.textAlign = 'center';
    ctx.fillRect(L, TOP - 4, W, 1);
    for (var t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      var x = L + (t - t0) / per;
      ctx.fillRect(Math.round(x), TOP - 8, 1, 4);
      ctx.fillText((t / u[0]).toFixed(digits) + ' ' + u[1], x, TOP - 12);
    }
    rows.forEach(function (r, n) {
      var y = TOP + n * RH;
      ctx.fillStyle = 'black';
      ctx.textAlign = 'right';
      ctx.fillText(r.label, L - 6, y + BT + BH - 3);
      ctx.fillStyle = '#f4f4f4';
      ctx.fillRect(L, y + RH - 1, W, 1);
      busy.fill(0); idle.fill(0); boot.fill(0);
      spread(r.i, per, function (c, d) { idle[c] += d; });
      spread(r.k, per, function (c, d) { boot[c] += d; });
      spread(r.s, per, function (c, d, j) { busy[c * NC + D.ncol[r.s.k[j]]] += d; });
      for (var c = 0; c < W; c++) {
        var x = L + c, most = 0, best = -1, total = 0;
        for (var k = 0; k < NC; k++) {
          var v = busy[c * NC + k];
          total += v;
          if (v > most) { most = v; best = k; }
        }
        if (boot[c] > 0) { ctx.fillStyle = bootStyle; ctx.fillRect(x, y + BT + 2, 1, BH - 4); }
        if (idle[c] >= per / 2) { ctx.fillStyle = idleStyle; ctx.fillRect(x, y + BT + 5, 1, 4); }
        if (best >= 0) {
          // Never less than MINB px where anything ran: short handlers stay in sight.
          var h = Math.max(MINB, Math.round(Math.min(1, total / per) * BH));
          ctx.fillStyle = styles[best];
          ctx.fillRect(x, y + BT + BH - h, 1, h);
        }
      }
      ctx.fillStyle = styles[NC - 2];
      for (var j = 0; j < r.b.n; j++) {
        if (r.b.e[j] < t0 || r.b.s[j] > t1) continue;
        var a = L + Math.max(0, (r.b.s[j] - t0) / per), b = L + Math.min(W, (r.b.e[j] - t0) / per);
        ctx.fillRect(a, y + KT, Math.max(1, b - a), KH);
      }
      ctx.fillStyle = styles[NC - 1];
      for (j = first(r.e, t0); j < r.e.n && r.e.s[j] <= t1; j++) {
        if (r.e.s[j] < t0) continue;
        var ex = L + (r.e.s[j] - t0) / per;
        ctx.beginPath();
        ctx.moveTo(ex - 3, y);
        ctx.lineTo(ex + 3, y);
        ctx.lineTo(ex, y + EH);
        ctx.fill();
      }
      if (r.cut !== null && r.cut < t1) {
        var cx = L + Math.max(0, (r.cut - t0) / per);
        ctx.fillStyle = 'rgba(255,0,80,0.15)';
        ctx.fillRect(cx, y, L + W - cx, RH - 1);
      }
    });
    label.textContent = fmt(t0) + ' to ' + fmt(t1) + ' (' + fmt(t1 - t0) + ')';
    ds.t0 = t0;
    ds.t1 = t1;
  }

  function setView(a, b, keepHash) {
    var span = Math.max(b - a, 10);
    if (span >= END) { a = 0; span = END; }
    a = Math.min(Math.max(a, 0), END - span);
    t0 = a;
    t1 = a + span;
    draw();
    if (!keepHash) {
      var hash = '#t0=' + Math.round(t0) + '&t1=' + Math.round(t1);
      // Some browsers refuse to change the address of a page opened from a file.
      try { history.replaceState(null, '', hash); } catch (e) { /* the view still moves */ }
    }
  }
  function fromHash() {
    var q = {};
    location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
      var p = kv.split('=');
      q[p[0]] = parseFloat(p[1]);
    });
    if (isFinite(q.t0) && isFinite(q.t1) && q.t1 > q.t0) setView(q.t0, q.t1, true);
    else setView(0, END, true);
  }
  function zoom(f, at) {
    setView(at - (at - t0) * f, at + (t1 - at) * f);
  }

  // Item `j` of list `l`: its name (unless `bare`), start and length.
  function span(l, j, bare) {
    var what = bare ? '' : D.names[l.k[j]] + ': ';
    return what + 'at ' + fmt(l.s[j]) + ', for ' + fmt(l.e[j] - l.s[j]);
  }

  // What is under the pointer, in one line.
  function hover(mx, my) {
    var n = Math.floor((my - TOP) / RH), r = rows[n];
    if (!r || mx < L || mx >= L + W) { info.textContent = ''; return; }
    var per = (t1 - t0) / W, t = t0 + (mx - L) * per, dy = my - TOP - n * RH, say = '';
    var lo = t0 + Math.floor(mx - L) * per, hi = lo + per, l, j, bestJ = -1, most = -1;
    if (dy >= KT - 1) {
      l = r.b;
      for (j = 0; j < l.n; j++) {
        if (l.s[j] <= hi && l.e[j] >= lo && l.e[j] - l.s[j] > most) {
          most = l.e[j] - l.s[j];
          bestJ = j;
        }
      }
      if (bestJ >= 0) say = 'bracket ' + span(l, bestJ);
    } else if (dy < EH + 1) {
      l = r.e;
      for (j = first(l, t - 4 * per); j < l.n && l.s[j] <= t + 4 * per; j++) {
        if (bestJ < 0 || Math.abs(l.s[j] - t) < Math.abs(l.s[bestJ] - t)) bestJ = j;
      }
      if (bestJ >= 0) say = 'event ' + D.names[l.k[bestJ]] + ': at ' + fmt(l.s[bestJ]);
    } else {
      l = r.s;
      for (j = first(l, lo); j < l.n && l.s[j] <= hi; j++) {
        var d = Math.min(hi, l.e[j]) - Math.max(lo, l.s[j]);
        if (l.e[j] >= lo && d > most) { most = d; bestJ = j; }
      }
      if (bestJ >= 0) {
        say = span(l, bestJ);
      } else {
        l = r.i;
        j = first(l, t);
        if (j < l.n && l.s[j] <= t && l.e[j] >= t) say = 'idle: ' + span(l, j, true);
      }
    }
    info.textContent = r.label + ' @ ' + fmt(t) + (say ? ' — ' + say : '');
  }

  var drag = null;
  function pos(e) {
    var b = cv.getBoundingClientRect();
    return [e.clientX - b.left, e.clientY - b.top];
  }
  cv.addEventListener('wheel', function (e) {
    e.preventDefault();
    var x = pos(e)[0];
    zoom(e.deltaY < 0 ? 1 / 1.25 : 1.25, t0 + Math.min(Math.max(x - L, 0), W) * (t1 - t0) / W);
  }, { passive: false });
  cv.addEventListener('mousedown', function (e) {
    drag = { x: pos(e)[0], t0: t0, t1: t1 };
    cv.style.cursor = 'grabbing';
  });
  window.addEventListener('mouseup', function () { drag = null; cv.style.cursor = 'grab'; });
  window.addEventListener('mousemove', function (e) {
    var p = pos(e);
    if (drag) {
      var dt = (p[0] - drag.x) * (drag.t1 - drag.t0) / W;
      setView(drag.t0 - dt, drag.t1 - dt);
    }
    if (e.target === cv) hover(p[0], p[1]);
  });
  document.getElementById('zoom-in').onclick = function () { zoom(1 / 2, (t0 + t1) / 2); };
  document.getElementById('zoom-out').onclick = function () { zoom(2, (t0 + t1) / 2); };
  document.getElementById('zoom-all').onclick = function () { setView(0, END); };
  window.addEventListener('hashchange', fromHash);
  fromHash();
  // Where the canvas is on the page, for a test reading the rendered picture.
  ds.pageY = Math.round(cv.getBoundingClientRect().top + window.scrollY);
}());
