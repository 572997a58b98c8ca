"""Golden cases of the shipped tiny model at another input size.

The shipped cases are 42x70 (a 3x5 patch grid): a KV page holds 15 tokens,
fewer than one 128-key tile, so `verify --device cuda` never runs the TMA
paged-attention kernels the full model uses. This wraps ../shared's
make_golden.py (imported, not copied) and changes only the random input
images' size. The model is still built for 42x70, so its weights are the
shipped tiny weights (same seed, same shapes) and the reference
interpolates DINO's 5x5 position table to the new grid, as it does for
3x5.

    python3 golden_sized.py --tool make_golden.py --height 224 --width 294 \
        -- --ref lingbot-map --out g/stream_kf2 --config tiny --keyframe-interval 2
"""
import argparse
import importlib.util
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tool", required=True, help="path to make_golden.py")
    p.add_argument("--height", type=int, required=True)
    p.add_argument("--width", type=int, required=True)
    p.add_argument("rest", nargs=argparse.REMAINDER, help="make_golden.py's own arguments, after --")
    args = p.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if args.height % 14 or args.width % 14:
        p.error("height and width must be multiples of the patch size, 14")
    if any(a == "--images" or a.startswith("--images=") for a in rest):
        p.error("only random inputs: real images are resized to the model's own size")

    spec = importlib.util.spec_from_file_location("make_golden", args.tool)
    mg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mg)

    load_inputs = mg.load_inputs

    def sized_inputs(a, cfg, n):
        return load_inputs(a, dict(cfg, img_h=args.height, img_w=args.width), n)

    mg.load_inputs = sized_inputs  # run_tiny looks it up at call time
    return mg.main(rest)


if __name__ == "__main__":
    sys.exit(main())
