#!/usr/bin/env python3
"""Writes the Pillow fixtures in this folder (run from this folder).

Made with Debian 12's python3-pil (Pillow 9.4.0, libjpeg-turbo 2.1.5), which
decodes and resizes as the reference's Pillow does. Sources are crops of
../shared/data/oxford/000001.png; pass its path as the first argument.
"""
import sys
from PIL import Image, ImageOps

src = Image.open(sys.argv[1]).convert("RGB")

# resize_<i>.png: source crop; resize_<i>_<w>x<h>.png: Pillow BICUBIC result.
cases = [((64, 48), (5, 4)), ((64, 48), (1, 1)), ((37, 29), (200, 150)), ((64, 48), (23, 47)),
         ((13, 7), (518, 294)), ((61, 45), (61, 17)), ((61, 45), (9, 45)), ((50, 50), (33, 77))]
for i, (crop, size) in enumerate(cases):
    s = src.crop((100, 80, 100 + crop[0], 80 + crop[1]))
    s.save(f"resize_{i}.png")
    s.resize(size, Image.Resampling.BICUBIC).save(f"resize_{i}_{size[0]}x{size[1]}.png")

# JPEGs of an odd-sized crop in three chroma layouts; <name>_decoded.png is
# ImageOps.exif_transpose(Image.open(jpg)).convert("RGB").
crop = src.crop((200, 120, 361, 237))  # 161×117
exif = Image.Exif()
exif[0x0112] = 6  # rotate 90° clockwise on display
crop.save("ycc420_orient6.jpg", quality=90, subsampling=2, exif=exif.tobytes())
crop.save("ycc422.jpg", quality=90, subsampling=1)
crop.save("ycc444.jpg", quality=90, subsampling=0)
for name in ("ycc420_orient6", "ycc422", "ycc444"):
    ImageOps.exif_transpose(Image.open(name + ".jpg")).convert("RGB").save(name + "_decoded.png")

# The reference's preprocessing of the oriented JPEG at width 518 (load_fn.py,
# mode "crop"), as 8-bit RGB: 117×161 → 518×714 → centre crop 518×518.
img = ImageOps.exif_transpose(Image.open("ycc420_orient6.jpg")).convert("RGB")
w, h = img.size
new_h = round(h * (518 / w) / 14) * 14
img = img.resize((518, new_h), Image.Resampling.BICUBIC)
if new_h > 518:
    top = (new_h - 518) // 2
    img = img.crop((0, top, 518, top + 518))
img.save("ycc420_orient6_pre518.png")

# PNG transparency that the reference does not composite (only mode "RGBA" is):
# grey+alpha, RGB with a tRNS colour key, palette with a tRNS entry.
la = Image.new("LA", (3, 1))
la.putdata([(10, 0), (100, 128), (200, 255)])
la.save("trns_la.png")
rgb = Image.new("RGB", (3, 1))
rgb.putdata([(10, 20, 30), (1, 2, 3), (200, 100, 50)])
rgb.save("trns_rgb.png", transparency=(1, 2, 3))
pal = Image.new("P", (3, 1))
pal.putpalette([10, 20, 30, 1, 2, 3, 200, 100, 50])
pal.putdata([0, 1, 2])
pal.save("trns_palette.png", transparency=1)
for name in ("trns_la", "trns_rgb", "trns_palette"):
    print(name, list(Image.open(name + ".png").convert("RGB").getdata()))
