package main

import (
	"fmt"
	"io"
)

// runLong is `lingbotmap run --help`'s text: what the command writes and
// how a run is made safe, stopped and resumed.
const runLong = `run feeds every frame of INPUT through the model and writes into --out:

  trajectory.tum  camera poses, "timestamp tx ty tz qx qy qz qw" (camera→world)
  map.ply         binary PLY, xyz + rgb: depth unprojected with each pose, pixels
                  with confidence > --conf-threshold, every --cloud-stride pixel,
                  averaged per --map-voxel cube
  depth/NNNNNN.png  per-frame depth for programs: 16-bit grey, value = depth ·
                  --depth-scale (millimetres by default; 0 = no depth). It looks
                  black in an image viewer: depths of a few metres use a few
                  thousandths of the 0–65535 range. Read it as numbers
                  (e.g. 2955 = 2.955 m), or look at depth_color/.
  depth_color/NNNNNN.png  the same depth for people: near yellow to far purple
                  over the frame's 2nd–98th percentile of depths, no depth
                  black, the range printed under it and listed per frame in
                  depth_color/ranges.tsv (model units). Written with depth/.
  conf/NNNNNN.png   per-frame confidence, 16-bit, value = conf · --conf-scale (--save-conf)
  preview.png     the trajectory seen from above over the map's points
  run.json        every setting as it ran (and the --config file, and where each
                  setting not left at its default came from), the version,
                  timings and the KV-cache state

Settings (config/lingbotmap.yaml) come from the built-in defaults, the --config
file, LINGBOTMAP_* environment variables and the flags, in that order. Unless
keyframe_interval, flow_threshold or windowed is set, an input longer than 320
frames takes one keyframe in ⌈N/320⌉ frames, as the reference does.

INPUT is a folder of .png/.jpg/.JPG images (sorted by name), a ROS 1 .bag file,
a ROS 2 bag (--topic, Image or CompressedImage): an .mcap or .db3 file or a
rosbag2 bag directory as ros2 bag record writes it (a folder with
metadata.yaml or .mcap/.db3 files is a bag, not an image folder), or a video
(decoded by ffmpeg).
Outputs are written as the run goes: a trajectory row as each frame finishes,
map.ply and run.json every --checkpoint-every frames, each file whole or not at
all, so a crash or a kill leaves readable files; run.json's "status" says
whether the run is in_progress, completed, interrupted, partial_input or
failed. Ctrl-C, SIGTERM and SIGHUP stop the run and write what was computed
so far. A folder holding a previous run's outputs is refused unless --force,
and one another run is writing is refused (OUT/.lingbotmap.lock). A run that
fails to start, or ends before mapping a frame, leaves nothing behind.

With --session every checkpoint also saves the whole session (engine state,
map, trajectory, input position) atomically into OUT/session/ (large: the KV
cache); "run --resume OUT" continues a stopped or killed run from there with
its saved settings (flags that differ from them are refused) once the
images it wrote are checked, and ends with the trajectory an uninterrupted
run gives.

Without --weights the run uses the random test model: its outputs are noise
(a warning says so, and run.json's "meaningful" is false).`

// randomModelWarning tells, loudly and whatever --quiet says, that a run
// without --weights maps with the random test model.
func randomModelWarning(w io.Writer, size string) {
	fmt.Fprintf(w, `
WARNING ==============================================================
  No --weights given: mapping with the RANDOM TEST MODEL (%s).
  Its depths, poses and map are noise, not a map of your input; it
  is there to test the pipeline. For a real map pass
  --weights lingbot-map.pt (the released checkpoint, see README.md).
======================================================================

`, size)
}
