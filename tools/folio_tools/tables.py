"""Plain-text and Markdown tables: first column left-aligned, the others right-aligned."""


def text_table(header, rows):
    rows = [[str(c) for c in r] for r in rows]
    header = [str(c) for c in header]
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]

    def line(cells):
        return "  ".join(c.ljust(widths[j]) if j == 0 else c.rjust(widths[j])
                         for j, c in enumerate(cells)).rstrip()
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def md_table(header, rows):
    def esc(c):
        return str(c).replace("|", "\\|")
    out = ["| " + " | ".join(esc(h) for h in header) + " |",
           "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
