/* Draws the plotly charts of a page (portal/charts.py writes each as
   <div class="plotly-chart" data-figure="…" data-config="…">), also in content htmx swaps in
   (the lease page's polled utilisation chart). A file, not plotly's inline script: the
   Content-Security-Policy allows no inline scripts.

   plotly.js (the basic partial bundle) is loaded the first time a chart is found, with its
   style sheet and the locale of the page's language ({% plotly_assets %} on this script's tag
   says where they are): pages without a chart download none of it. A click on a bar whose
   point carries a link (customdata "/leases/new/?…", the pool timeline's free slots) opens it. */
(function () {
  "use strict";

  var assets = (document.currentScript && document.currentScript.dataset) || {};
  var loading = null;

  function load(src) {
    return new Promise(function (resolve, reject) {
      var script = document.createElement("script");
      script.src = src;
      script.onload = resolve;
      script.onerror = reject;
      document.head.appendChild(script);
    });
  }

  function plotly() {
    if (window.Plotly) {
      return Promise.resolve(window.Plotly);
    }
    if (!loading) {
      if (assets.plotlyCss) {
        var link = document.createElement("link");
        link.rel = "stylesheet";
        link.id = "plotly.js-style-global";
        link.className = "no-inline-styles";
        link.href = assets.plotlyCss;
        document.head.appendChild(link);
      }
      (assets.plotlyStyleIds || "").split(" ").forEach(function (id) {
        if (id) {
          var meta = document.createElement("meta");
          meta.name = "plotly-style";
          meta.id = id;
          document.head.appendChild(meta);
        }
      });
      loading = load(assets.plotly).then(function () {
        return assets.plotlyLocaleSrc ? load(assets.plotlyLocaleSrc) : null;
      }).then(function () {
        return window.Plotly;
      });
    }
    return loading;
  }

  function charts(root) {
    if (!root || !root.querySelectorAll) {
      return [];
    }
    var found = Array.prototype.slice.call(root.querySelectorAll("div.plotly-chart[data-figure]"));
    if (root.matches && root.matches("div.plotly-chart[data-figure]")) {
      found.push(root);
    }
    return found.filter(function (el) {
      return !el.dataset.drawn;
    });
  }

  function draw(root) {
    var todo = charts(root);
    if (!todo.length || !assets.plotly) {
      return;
    }
    todo.forEach(function (el) {
      el.dataset.drawn = "1";
    });
    plotly().then(function (Plotly) {
      todo.forEach(function (el) {
        var figure = JSON.parse(el.dataset.figure);
        var config = JSON.parse(el.dataset.config || "{}");
        if (assets.plotlyLocale) {
          config.locale = assets.plotlyLocale;
        }
        Plotly.newPlot(el, figure.data || [], figure.layout || {}, config).then(function () {
          el.dataset.ready = "1";
        });
        el.on("plotly_click", function (event) {
          var point = event && event.points && event.points[0];
          var link = point && point.customdata;
          if (typeof link === "string" && link.charAt(0) === "/") {
            window.location = link;
          }
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    draw(document);
  });
  document.addEventListener("htmx:load", function (event) {
    draw(event.target);
  });
})();
